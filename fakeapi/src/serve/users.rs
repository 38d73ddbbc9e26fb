//! Bearer-token users of a served cluster: the `NAME:TOKEN[:GROUPS]` form and random tokens.

use std::fmt;
use std::str::FromStr;

use ring::rand::{SecureRandom, SystemRandom};

use crate::rbac::{SYSTEM_AUTHENTICATED, UserInfo};

/// A bearer token; a secret, so its `Debug` form is redacted.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    /// A token taken as given, if it is non-empty printable ASCII without spaces.
    pub fn new(token: &str) -> Result<Self, UserSpecError> {
        if token.is_empty() {
            return Err(UserSpecError::EmptyToken);
        }
        // Tokens travel in an `Authorization` header and in YAML: printable ASCII only.
        if !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(UserSpecError::InvalidToken);
        }
        Ok(Self(token.to_string()))
    }

    /// 32 bytes from the operating system's CSPRNG, hex-encoded.
    pub fn random() -> Result<Self, ring::error::Unspecified> {
        let mut bytes = [0u8; 32];
        SystemRandom::new().fill(&mut bytes)?;
        Ok(Self(bytes.iter().map(|b| format!("{b:02x}")).collect()))
    }

    /// The secret itself (for an `Authorization` header or a kubeconfig).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Compares in time independent of where the tokens differ.
    pub fn matches(&self, presented: &str) -> bool {
        let (a, b) = (self.0.as_bytes(), presented.as_bytes());
        a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Why a user specification was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserSpecError {
    /// Not `NAME:TOKEN[:GROUPS]`.
    #[error("expected NAME:TOKEN[:GROUP,GROUP...]")]
    Malformed,
    /// The user name is empty.
    #[error("user name must not be empty")]
    EmptyName,
    /// The user name cannot be a kubeconfig file suffix.
    #[error("user name {0:?} may only contain letters, digits, '-', '_', '.', '@' and ':'")]
    InvalidName(String),
    /// The token is empty.
    #[error("token must not be empty")]
    EmptyToken,
    /// The token holds whitespace or non-ASCII characters.
    #[error("token must be printable ASCII without spaces")]
    InvalidToken,
    /// A group is empty.
    #[error("group names must not be empty")]
    EmptyGroup,
}

/// A user to register on a served cluster: who a bearer token authenticates as.
#[derive(Clone, PartialEq, Eq)]
pub struct UserSpec {
    /// User name, e.g. `alice`.
    pub name: String,
    /// The user's bearer token.
    pub token: Token,
    /// Groups besides `system:authenticated` (which every authenticated user is in).
    pub groups: Vec<String>,
}

impl fmt::Debug for UserSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserSpec")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl UserSpec {
    /// A user with a token and groups, validated.
    pub fn new(name: &str, token: &str, groups: Vec<String>) -> Result<Self, UserSpecError> {
        validate_name(name)?;
        if groups.iter().any(String::is_empty) {
            return Err(UserSpecError::EmptyGroup);
        }
        Ok(Self {
            name: name.to_string(),
            token: Token::new(token)?,
            groups,
        })
    }

    /// The identity the token authenticates as (kube-apiserver adds `system:authenticated`).
    pub fn user_info(&self) -> UserInfo {
        let mut groups = self.groups.clone();
        if !groups.iter().any(|g| g == SYSTEM_AUTHENTICATED) {
            groups.push(SYSTEM_AUTHENTICATED.to_string());
        }
        UserInfo {
            name: self.name.clone(),
            groups,
        }
    }
}

impl FromStr for UserSpec {
    type Err = UserSpecError;

    /// Parses `NAME:TOKEN` or `NAME:TOKEN:GROUP,GROUP` (a token cannot contain `:`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut parts = s.splitn(3, ':');
        let (Some(name), Some(token)) = (parts.next(), parts.next()) else {
            return Err(UserSpecError::Malformed);
        };
        let groups = match parts.next() {
            None => Vec::new(),
            Some(list) => list.split(',').map(str::to_string).collect(),
        };
        Self::new(name, token, groups)
    }
}

fn validate_name(name: &str) -> Result<(), UserSpecError> {
    if name.is_empty() {
        return Err(UserSpecError::EmptyName);
    }
    // The name becomes a file suffix (`FILE.<name>`) and a kubeconfig context name.
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@' | ':');
    if !name.chars().all(allowed) || name.starts_with('.') {
        return Err(UserSpecError::InvalidName(name.to_string()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_token_and_groups_parse() {
        let spec: UserSpec = "alice:s3cret:dev,ops".parse().unwrap();
        assert_eq!(spec.name, "alice");
        assert_eq!(spec.token.expose(), "s3cret");
        assert_eq!(spec.groups, vec!["dev", "ops"]);
        assert_eq!(spec.user_info().groups, vec!["dev", "ops", SYSTEM_AUTHENTICATED]);
    }

    #[test]
    fn groups_are_optional() {
        let spec: UserSpec = "bob:tok".parse().unwrap();
        assert!(spec.groups.is_empty());
        assert_eq!(spec.user_info().groups, vec![SYSTEM_AUTHENTICATED]);
    }

    #[test]
    fn malformed_specs_are_refused() {
        assert_eq!("alice".parse::<UserSpec>(), Err(UserSpecError::Malformed));
        assert_eq!(":tok".parse::<UserSpec>(), Err(UserSpecError::EmptyName));
        assert_eq!("alice:".parse::<UserSpec>(), Err(UserSpecError::EmptyToken));
        assert_eq!("alice:a b".parse::<UserSpec>(), Err(UserSpecError::InvalidToken));
        assert_eq!("alice:tok:dev,".parse::<UserSpec>(), Err(UserSpecError::EmptyGroup));
        assert!(matches!(
            "../x:tok".parse::<UserSpec>(),
            Err(UserSpecError::InvalidName(_))
        ));
    }

    #[test]
    fn debug_never_shows_the_token() {
        let spec: UserSpec = "alice:s3cret".parse().unwrap();
        assert!(!format!("{spec:?}").contains("s3cret"));
        assert!(!format!("{:?}", spec.token).contains("s3cret"));
    }

    #[test]
    fn random_tokens_differ_and_compare_exactly() {
        let (a, b) = (Token::random().unwrap(), Token::random().unwrap());
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert!(a.matches(a.expose()));
        assert!(!a.matches(b.expose()));
        assert!(!a.matches(&a.expose()[..63]));
    }
}

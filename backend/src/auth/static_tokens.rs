//! Static bearer tokens from a file (`--token-file`), for scripts, CI and small installs.
//!
//! The format is kube-apiserver's static token file: one `token,user` line per token; further
//! columns (kube-apiserver's uid and groups) are allowed and ignored; blank lines and lines
//! starting with `#` are skipped. A token must be unique; the user becomes the subject
//! `token:<user>`. A token has at least [`MIN_TOKEN_CHARS`] characters. Only SHA-256 digests of the tokens stay in memory, and a presented token is
//! compared against every digest in constant time.

use std::fmt;
use std::path::Path;

use async_trait::async_trait;
use kbind_api::service::AuthMethod;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::{AuthError, Authenticator, Caller, Identity, SetupError, Via, bearer_token};

/// The shortest token the file may list: a short one is guessable, even throttled.
pub const MIN_TOKEN_CHARS: usize = 32;

struct Entry {
    digest: [u8; 32],
    user: String,
}

/// Callers recognised by a bearer token listed in the token file.
pub struct StaticTokens {
    entries: Vec<Entry>,
}

impl StaticTokens {
    /// Reads a token file.
    pub fn from_file(path: &Path) -> Result<Self, SetupError> {
        let text = std::fs::read_to_string(path).map_err(|source| SetupError::ReadFile {
            what: "--token-file",
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text).map_err(|(line, problem)| SetupError::TokenFile {
            path: path.to_owned(),
            line,
            problem,
        })
    }

    /// Parses the file's text; an error is (line number, problem), never the token.
    fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut entries: Vec<Entry> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_no = i + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut columns = line.split(',').map(str::trim);
            let token = columns.next().unwrap_or_default();
            let user = columns.next().unwrap_or_default().trim_matches('"');
            if token.is_empty() {
                return Err((line_no, "the token (first column) is empty".into()));
            }
            if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err((line_no, "the token contains whitespace".into()));
            }
            if user.is_empty() {
                return Err((line_no, "the user (second column) is missing".into()));
            }
            if token.chars().count() < MIN_TOKEN_CHARS {
                return Err((
                    line_no,
                    format!(
                        "the token of user {user:?} is shorter than {MIN_TOKEN_CHARS} characters; \
                         use a random one, e.g. `openssl rand -hex 32`"
                    ),
                ));
            }
            let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
            if entries.iter().any(|e| e.digest == digest) {
                return Err((line_no, "the token is listed twice".into()));
            }
            entries.push(Entry {
                digest,
                user: user.to_owned(),
            });
        }
        if entries.is_empty() {
            return Err((0, "the file lists no token".into()));
        }
        Ok(Self { entries })
    }

    /// The user a token belongs to: every entry is compared, in constant time.
    fn user_of(&self, token: &str) -> Option<&str> {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let mut found = None;
        for entry in &self.entries {
            if bool::from(entry.digest.ct_eq(&digest)) {
                found = Some(entry.user.as_str());
            }
        }
        found
    }
}

impl fmt::Debug for StaticTokens {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticTokens")
            .field("tokens", &self.entries.len())
            .finish()
    }
}

#[async_trait]
impl Authenticator for StaticTokens {
    fn method(&self) -> AuthMethod {
        AuthMethod {
            kind: "token".into(),
            login_path: None,
            ..Default::default()
        }
    }

    /// `None` for a token it does not list: another method (an OIDC ID token) may know it; the
    /// [`super::Chain`] answers 401 when none does.
    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
        let Some(token) = bearer_token(headers) else {
            return Ok(None);
        };
        Ok(self.user_of(token).map(|user| Caller {
            identity: Identity {
                subject: format!("token:{user}"),
                name: Some(user.to_owned()),
            },
            via: Via::Bearer,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bearer(token: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("Bearer {token}").parse().expect("ascii"),
        );
        h
    }

    const ALICE: &str = "s3cret-alice-0123456789abcdef0123";
    const BOB: &str = "s3cret-bob-0123456789abcdef012345";
    const FILE: &str = "# kube-apiserver style\n\
        s3cret-alice-0123456789abcdef0123,alice\n\
        \n\
        s3cret-bob-0123456789abcdef012345 , bob , 1002, \"dev,ops\"\n";

    #[tokio::test]
    async fn a_listed_token_is_its_user_and_an_unlisted_one_is_not_recognised() {
        let tokens = StaticTokens::parse(FILE).expect("valid file");
        let alice = tokens.authenticate(&bearer(ALICE)).await.expect("ok");
        assert_eq!(
            alice,
            Some(Caller {
                identity: Identity {
                    subject: "token:alice".into(),
                    name: Some("alice".into()),
                },
                via: Via::Bearer,
            })
        );
        let bob = tokens.authenticate(&bearer(BOB)).await.expect("ok");
        assert_eq!(bob.map(|c| c.identity.subject), Some("token:bob".into()));
        let shorter = &ALICE[..ALICE.len() - 1];
        let longer = format!("{ALICE}e");
        let upper = ALICE.to_uppercase();
        for wrong in [shorter, &longer, &upper, "alice", ""] {
            let got = tokens.authenticate(&bearer(wrong)).await.expect("ok");
            assert_eq!(got, None, "{wrong:?} must not be recognised");
        }
        let none = tokens.authenticate(&http::HeaderMap::new()).await.expect("ok");
        assert_eq!(none, None);
    }

    #[tokio::test]
    async fn the_bearer_scheme_is_case_insensitive_and_other_schemes_are_not_tokens() {
        let tokens = StaticTokens::parse(FILE).expect("valid file");
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::AUTHORIZATION,
            format!("bearer {ALICE}").parse().expect("ascii"),
        );
        assert!(tokens.authenticate(&h).await.expect("ok").is_some());
        h.insert(
            http::header::AUTHORIZATION,
            format!("Basic {ALICE}").parse().expect("ascii"),
        );
        assert_eq!(tokens.authenticate(&h).await.expect("ok"), None);
    }

    #[test]
    fn a_bad_file_names_the_line_and_never_the_token() {
        let cases = [
            ("ok-token-123-0123456789abcdef0123,alice\nlonely-token-123\n", 2, "user"),
            ("ok-token-123-0123456789abcdef0123,alice\n,bob\n", 2, "empty"),
            (
                "dup-token-123-0123456789abcdef012,alice\ndup-token-123-0123456789abcdef012,bob\n",
                2,
                "twice",
            ),
            ("# nothing\n\n", 0, "no token"),
        ];
        for (text, line, words) in cases {
            let Err((got_line, problem)) = StaticTokens::parse(text) else {
                panic!("{text:?} must be refused");
            };
            assert_eq!(got_line, line, "{text:?}: {problem}");
            assert!(problem.contains(words), "{text:?}: {problem}");
            assert!(!problem.contains("token-123"), "{problem}");
        }
    }

    #[test]
    fn a_token_shorter_than_32_characters_is_refused_naming_the_line_and_user() {
        let text = format!("{ALICE},alice\n# a comment\nshort-token-123,bob\n");
        let Err((line, problem)) = StaticTokens::parse(&text) else {
            panic!("a 15-character token must be refused");
        };
        assert_eq!(line, 3, "{problem}");
        assert!(problem.contains("\"bob\"") && problem.contains("32"), "{problem}");
        assert!(!problem.contains("short-token-123"), "{problem}");
        let exactly = format!("{},carol\n", "x".repeat(MIN_TOKEN_CHARS));
        assert!(StaticTokens::parse(&exactly).is_ok(), "32 characters are enough");
    }

    #[test]
    fn debug_output_shows_no_token() {
        let tokens = StaticTokens::parse(FILE).expect("valid file");
        let shown = format!("{tokens:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

//! The users of a test cluster and the static token file that authenticates them.

use std::fmt;

/// A user every cluster of an environment knows, authenticated by a bearer token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum User {
    /// `admin`, in `system:masters`: may do anything.
    Admin,
    /// `alice`, only `system:authenticated`: needs RBAC grants.
    Alice,
    /// `bob`, only `system:authenticated`: needs RBAC grants.
    Bob,
    /// `carol`, only `system:authenticated`: needs RBAC grants.
    Carol,
}

impl User {
    /// Every user, admin first.
    pub const ALL: [User; 4] = [User::Admin, User::Alice, User::Bob, User::Carol];

    /// The user name the apiserver sees (what RBAC subjects name).
    pub fn name(self) -> &'static str {
        match self {
            User::Admin => "admin",
            User::Alice => "alice",
            User::Bob => "bob",
            User::Carol => "carol",
        }
    }

    /// The groups besides `system:authenticated`, which the apiserver adds itself.
    fn groups(self) -> Option<&'static str> {
        match self {
            User::Admin => Some("system:masters"),
            User::Alice | User::Bob | User::Carol => None,
        }
    }
}

impl fmt::Display for User {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The name the kube-controller-manager authenticates as; in `system:masters` so every controller may act.
pub(crate) const CONTROLLER_MANAGER: &str = "system:kube-controller-manager";

/// Random bearer tokens for the users and the controller-manager, shared by every cluster of an environment.
#[derive(Clone, Debug)]
pub(crate) struct Tokens {
    users: [String; 4],
    controller_manager: String,
}

impl Tokens {
    /// Fresh random tokens.
    pub(crate) fn generate() -> Self {
        let token = || uuid::Uuid::new_v4().simple().to_string();
        Tokens {
            users: User::ALL.map(|_| token()),
            controller_manager: token(),
        }
    }

    /// The bearer token of `user`.
    pub(crate) fn of(&self, user: User) -> &str {
        &self.users[user as usize]
    }

    /// The bearer token of the kube-controller-manager.
    pub(crate) fn controller_manager(&self) -> &str {
        &self.controller_manager
    }

    /// The `--token-auth-file` CSV: `token,user,uid[,"group1,group2"]`.
    pub(crate) fn auth_file(&self) -> String {
        let mut csv = String::new();
        for user in User::ALL {
            let (token, name) = (self.of(user), user.name());
            // Why: an empty fourth column would give the user a group named "".
            match user.groups() {
                Some(groups) => csv.push_str(&format!("{token},{name},{name},\"{groups}\"\n")),
                None => csv.push_str(&format!("{token},{name},{name}\n")),
            }
        }
        csv.push_str(&format!(
            "{},{CONTROLLER_MANAGER},{CONTROLLER_MANAGER},\"system:masters\"\n",
            self.controller_manager
        ));
        csv
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_puts_only_admin_and_the_controller_manager_in_system_masters() {
        let tokens = Tokens::generate();
        let csv = tokens.auth_file();
        let masters: Vec<&str> = csv
            .lines()
            .filter(|l| l.ends_with("\"system:masters\""))
            .map(|l| l.split(',').nth(1).unwrap())
            .collect();
        assert_eq!(masters, vec!["admin", CONTROLLER_MANAGER]);
        assert!(csv.contains(&format!("{},alice,alice\n", tokens.of(User::Alice))));
        assert_eq!(csv.lines().count(), 5);
    }

    #[test]
    fn tokens_are_distinct_per_user() {
        let tokens = Tokens::generate();
        let mut all: Vec<&str> = User::ALL.iter().map(|u| tokens.of(*u)).collect();
        all.push(tokens.controller_manager());
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 5);
    }
}

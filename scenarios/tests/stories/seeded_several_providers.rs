//! Placeholder until the seeded several-providers property lands (issue 26).

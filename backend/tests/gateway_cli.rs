//! `kbind-backend run` refuses unusable flags with a message naming the flag, before it
//! contacts any provider.

use std::process::Command;

fn run(args: &[&str]) -> (bool, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kbind-backend"))
        .arg("run")
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn run_needs_a_module() {
    let (ok, stderr) = run(&[]);
    assert!(!ok);
    assert!(
        stderr.contains("pass at least one of --gateway, --issuer, --reaper"),
        "{stderr}"
    );
}

#[test]
fn the_gateway_names_each_missing_or_unusable_flag() {
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n").unwrap();
    let ca_flag = format!("--provider-ca={}", ca.display());
    let cases: [(&[&str], &str); 5] = [
        (&["--gateway"], "--gateway needs --public-url"),
        (
            &["--gateway", "--public-url=https://kbind.example.org"],
            "--gateway needs --provider-name",
        ),
        (
            &[
                "--gateway",
                "--public-url=https://kbind.example.org",
                "--provider-name=acme",
                "--provider-url=http://api.example.org",
                &ca_flag,
            ],
            "--provider-url",
        ),
        (
            &[
                "--gateway",
                "--public-url=https://kbind.example.org",
                "--provider-name=acme",
                "--provider-url=https://api.example.org",
            ],
            "--gateway needs --provider-ca",
        ),
        (
            &[
                "--gateway",
                "--public-url=https://kbind.example.org",
                "--provider-name=acme",
                "--provider-url=https://api.example.org",
                "--provider-ca=/nonexistent/ca.pem",
            ],
            "failed to read --provider-ca",
        ),
    ];
    for (args, expected) in cases {
        let (ok, stderr) = run(args);
        assert!(!ok, "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

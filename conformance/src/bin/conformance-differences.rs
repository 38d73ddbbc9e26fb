//! Prints the conformance suite's deliberate differences as JSON.

fn main() {
    let json = kbind_conformance::differences_json();
    println!(
        "{}",
        serde_json::to_string_pretty(&json).unwrap_or_else(|_| json.to_string())
    );
}

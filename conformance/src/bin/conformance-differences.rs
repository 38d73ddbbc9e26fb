//! Prints the conformance suite's deliberate differences as JSON: runs (1)–(3)'s, then run (4)'s
//! (the Go client program, `"run": "go-client"`).

fn main() {
    let json = kbind_conformance::differences::all_differences_json();
    println!(
        "{}",
        serde_json::to_string_pretty(&json).unwrap_or_else(|_| json.to_string())
    );
}

//! Loopback ports and polling helpers shared by the etcd and apiserver start-up.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::{Ipv4Addr, TcpListener};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::Error;

/// How often start-up conditions are re-checked.
pub(crate) const POLL: Duration = Duration::from_millis(200);

/// A port on 127.0.0.1 that was free a moment ago and that this process has not handed out before.
///
/// Why the registry: two apiservers of one environment given the same port would both look ready through the
/// one that won the bind (they share tokens); across environments the random tokens make a clash fail loudly,
/// and callers retry when a server reports the port taken.
pub(crate) fn free_port() -> Result<u16, Error> {
    static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    let mut handed_out = HANDED_OUT.lock();
    for _ in 0..64 {
        let port = probe_port()?;
        if handed_out.insert(port) {
            return Ok(port);
        }
    }
    Err(Error::io(
        "no fresh loopback port after 64 tries".to_string(),
        std::io::Error::other("ports exhausted"),
    ))
}

fn probe_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("failed to bind a loopback port".to_string(), e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("failed to read a bound port".to_string(), e))
}

/// Whether a server log says its port was taken between our probe and its bind.
pub(crate) fn port_clash(log: &str) -> bool {
    log.contains("address already in use")
}

/// Re-checks `probe` every [`POLL`] until it yields a value; before each wait, `alive` may fail the wait early
/// (a server that exited). Past `deadline` fails with [`Error::NotReady`] carrying `log()`.
pub(crate) async fn poll_until<T, P, F>(
    what: &str,
    deadline: Instant,
    mut alive: impl FnMut() -> Result<(), Error>,
    log: impl Fn() -> String,
    mut probe: P,
) -> Result<T, Error>
where
    P: FnMut() -> F,
    F: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(value) = probe().await {
            return Ok(value);
        }
        alive()?;
        if Instant::now() >= deadline {
            return Err(Error::NotReady {
                what: what.to_string(),
                after: started.elapsed(),
                log: log(),
            });
        }
        tokio::time::sleep(POLL).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_never_handed_out_twice() {
        let ports: BTreeSet<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        assert_eq!(ports.len(), 200);
    }

    #[test]
    fn a_probed_port_can_be_bound_again() {
        let port = free_port().unwrap();
        assert_ne!(port, 0);
        TcpListener::bind((Ipv4Addr::LOCALHOST, port)).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn polling_gives_up_at_the_deadline_with_the_log() {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut probes = 0;
        let err = poll_until(
            "thing",
            deadline,
            || Ok(()),
            || "last words".to_string(),
            || {
                probes += 1;
                async { None::<()> }
            },
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&err, Error::NotReady { what, log, .. } if what == "thing" && log == "last words"),
            "{err}"
        );
        assert_eq!(probes, 26, "one probe at start and one per 200 ms over 5 s");
    }

    #[tokio::test(start_paused = true)]
    async fn polling_stops_when_the_server_dies() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut checks = 0;
        let err = poll_until(
            "thing",
            deadline,
            || {
                checks += 1;
                if checks == 3 {
                    Err(Error::io("gone".into(), std::io::Error::other("x")))
                } else {
                    Ok(())
                }
            },
            String::new,
            || async { None::<()> },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[tokio::test(start_paused = true)]
    async fn polling_returns_the_first_value() {
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut n = 0;
        let got = poll_until(
            "thing",
            deadline,
            || Ok(()),
            String::new,
            || {
                n += 1;
                let v = (n == 4).then_some(n);
                async move { v }
            },
        )
        .await
        .unwrap();
        assert_eq!(got, 4);
    }
}

//! A watch response body as events: kube-client's `request_events`, with a small read buffer.
//!
//! kube reads each watch through a `FramedRead` with tokio-util's default 8 KiB buffer, held for
//! the watch's whole life; a konnector keeps three watches open per bound API, so that buffer
//! is a large share of what an idle bound API costs. The buffer here starts at
//! [`READ_BUFFER`], grows only for an event that needs it and shrinks back after it. Everything else (line splitting,
//! the end-of-stream and timeout cases, how errors surface) follows kube-client 5.

use bytes::BytesMut;
use futures::{StreamExt, TryStreamExt};
use http_body_util::BodyExt;
use kube::core::{DynamicObject, Status, WatchEvent};
use tokio_util::codec::{FramedRead, LinesCodec, LinesCodecError};
use tokio_util::io::StreamReader;

use crate::WatchStream;

/// The read buffer a watch starts with: an idle watch sees only bookmarks (about 200 bytes).
const READ_BUFFER: usize = 1024;
/// A read buffer larger than this goes back to [`READ_BUFFER`] between events.
const RELEASE_ABOVE: usize = 4 * READ_BUFFER;

/// The events of a watch answer's body (the status was already checked).
pub(crate) fn events(body: kube::client::Body) -> WatchStream {
    let reader = StreamReader::new(body.into_data_stream().map_err(|e| {
        // A watch the server or a proxy ends mid-chunk is resumable, not an error: kube marks
        // it UnexpectedEof so the line reader ends quietly.
        let chunk_eof = e.to_string().contains("unexpected EOF during chunk");
        if chunk_eof || chain_has_unexpected_eof(&e) {
            return std::io::Error::new(std::io::ErrorKind::UnexpectedEof, e);
        }
        std::io::Error::other(e)
    }));
    let framed = FramedRead::with_capacity(reader, LinesCodec::new(), READ_BUFFER);
    futures::stream::unfold(framed, |mut framed| async move {
        let line = framed.next().await?;
        release_grown(framed.read_buffer_mut());
        Some((line, framed))
    })
    .filter_map(|line| async move { event(line).map(crate::kube_impl::watch_item) })
    .boxed()
}

/// Gives back a buffer a large event grew once nothing of the next line is in it: without
/// this a watch keeps, for its whole life, room for the largest object it ever saw.
fn release_grown(buffer: &mut BytesMut) {
    if buffer.is_empty() && buffer.capacity() > RELEASE_ABOVE {
        *buffer = BytesMut::with_capacity(READ_BUFFER);
    }
}

/// One line as kube-client reads it: an event, the Status of a failed watch, or nothing (an
/// incomplete last line, a client timeout, an ended stream).
fn event(line: Result<String, LinesCodecError>) -> Option<kube::Result<WatchEvent<DynamicObject>>> {
    match line {
        Ok(line) => match serde_json::from_str::<WatchEvent<DynamicObject>>(&line) {
            Ok(event) => Some(Ok(event)),
            Err(e) if e.is_eof() => None,
            Err(e) => match serde_json::from_str::<Status>(&line) {
                Ok(status) => Some(Err(kube::Error::Api(status.boxed()))),
                Err(_) => Some(Err(kube::Error::SerdeError(e))),
            },
        },
        Err(LinesCodecError::Io(e)) => match e.kind() {
            std::io::ErrorKind::TimedOut | std::io::ErrorKind::UnexpectedEof => {
                tracing::debug!(error = %e, "watch stream ended");
                None
            }
            _ => Some(Err(kube::Error::ReadEvents(e))),
        },
        Err(LinesCodecError::MaxLineLengthExceeded) => Some(Err(kube::Error::LinesCodecMaxLineLengthExceeded)),
    }
}

/// Whether an `UnexpectedEof` I/O error is somewhere in `err`'s chain (TLS stacks nest it).
fn chain_has_unexpected_eof(err: &(dyn std::error::Error + 'static)) -> bool {
    crate::error::causes(err).any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::UnexpectedEof)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Error;
    use serde_json::json;

    async fn read(body: String) -> Vec<crate::Result<WatchEvent<DynamicObject>>> {
        events(kube::client::Body::from(body.into_bytes())).collect().await
    }

    fn widget(name: &str, rv: &str, spec_bytes: usize) -> serde_json::Value {
        json!({"apiVersion": "example.org/v1", "kind": "Widget",
               "metadata": {"name": name, "namespace": "ns1", "resourceVersion": rv},
               "spec": {"blob": "x".repeat(spec_bytes)}})
    }

    #[tokio::test]
    async fn an_event_larger_than_the_starting_buffer_arrives_whole() {
        let body = format!(
            "{}\n{}\n",
            json!({"type": "ADDED", "object": widget("big", "6", 10 * READ_BUFFER)}),
            json!({"type": "MODIFIED", "object": widget("small", "7", 10)}),
        );
        let got = read(body).await;
        assert_eq!(got.len(), 2, "{got:?}");
        match &got[0] {
            Ok(WatchEvent::Added(obj)) => {
                assert_eq!(obj.metadata.name.as_deref(), Some("big"));
                assert_eq!(obj.data["spec"]["blob"].as_str().map(str::len), Some(10 * READ_BUFFER));
            }
            other => panic!("expected the big ADDED event, got {other:?}"),
        }
        assert!(matches!(&got[1], Ok(WatchEvent::Modified(o)) if o.metadata.name.as_deref() == Some("small")));
    }

    #[tokio::test]
    async fn a_status_line_is_the_servers_error_and_a_cut_last_line_is_dropped() {
        let gone = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                          "reason": "Expired", "message": "too old resource version"});
        let body = format!(
            "{}\n{gone}\n{{\"type\": \"ADDED\", \"obj",
            json!({"type": "ERROR", "object": gone})
        );
        let got = read(body).await;
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(matches!(&got[0], Err(Error::Gone { .. })), "ERROR event: {:?}", got[0]);
        assert!(
            matches!(&got[1], Err(Error::Gone { .. })),
            "bare Status line: {:?}",
            got[1]
        );
    }

    #[test]
    fn a_grown_buffer_is_given_back_only_when_no_part_of_the_next_line_is_in_it() {
        let mut emptied = BytesMut::with_capacity(64 * READ_BUFFER);
        release_grown(&mut emptied);
        assert!(emptied.capacity() <= RELEASE_ABOVE, "capacity {}", emptied.capacity());

        let mut holding = BytesMut::with_capacity(64 * READ_BUFFER);
        holding.extend_from_slice(b"{\"type\": \"ADD");
        release_grown(&mut holding);
        assert_eq!(
            &holding[..],
            b"{\"type\": \"ADD",
            "the start of the next line was dropped"
        );
        assert!(holding.capacity() >= 64 * READ_BUFFER);
    }

    #[tokio::test]
    async fn a_line_that_is_neither_event_nor_status_is_a_decode_error() {
        let got = read("<html>bad gateway</html>\n".into()).await;
        assert!(matches!(got.as_slice(), [Err(Error::Decode(_))]), "{got:?}");
    }
}

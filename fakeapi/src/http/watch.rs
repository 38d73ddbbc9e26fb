//! Watches on the wire: newline-delimited JSON events (or length-prefixed protobuf `WatchEvent`
//! frames) in one streamed (chunked) body that ends when the cluster's watch ends.

use std::io;

use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use kbind_cluster::{Error, WatchEvent};
use serde_json::{Value, json};

use super::errors::{ApiError, status_value};
use crate::watch::ValueWatchStream;

/// Turns an event's object into what the client asked for (a Table row, say).
pub(crate) type Transform = Box<dyn Fn(Value) -> Value + Send + 'static>;

/// The streamed answer to a watch request, in protobuf frames when `protobuf`.
pub(crate) fn response(events: ValueWatchStream, transform: Transform, protobuf: bool) -> Response {
    let lines = events
        .map(move |item| line(item, &transform, protobuf))
        // An ERROR event ends the watch, as kube-apiserver closes the stream after sending one.
        .scan(false, |ended, line| {
            if *ended {
                return futures::future::ready(None);
            }
            *ended = matches!(line, Line::Final(_) | Line::Broken(_));
            futures::future::ready(Some(line))
        })
        .map(|line| match line {
            Line::Event(bytes) | Line::Final(bytes) => Ok(bytes),
            // A partitioned cluster breaks the connection rather than answering.
            Line::Broken(reason) => Err(io::Error::new(io::ErrorKind::ConnectionAborted, reason)),
        });
    let content_type = if protobuf {
        super::protobuf::WATCH_MEDIA_TYPE
    } else {
        "application/json"
    };
    ([(header::CONTENT_TYPE, content_type)], Body::from_stream(lines)).into_response()
}

/// One line of a watch body.
enum Line {
    Event(Bytes),
    /// An ERROR event, after which the stream ends.
    Final(Bytes),
    /// The connection breaks.
    Broken(String),
}

fn line(item: kbind_cluster::Result<WatchEvent<Value>>, transform: &Transform, protobuf: bool) -> Line {
    let event = match item {
        Ok(WatchEvent::Added(o)) => json!({"type": "ADDED", "object": transform(o)}),
        Ok(WatchEvent::Modified(o)) => json!({"type": "MODIFIED", "object": transform(o)}),
        Ok(WatchEvent::Deleted(o)) => json!({"type": "DELETED", "object": transform(o)}),
        Ok(WatchEvent::Bookmark(b)) => json!({"type": "BOOKMARK", "object": b}),
        Ok(WatchEvent::Error(status)) => return Line::Final(encode(&error_event(status_value(&status)), protobuf)),
        Err(Error::Transport(reason)) => return Line::Broken(reason),
        Err(err) => {
            let status = status_value(&ApiError::from(err).status());
            return Line::Final(encode(&error_event(status), protobuf));
        }
    };
    if protobuf {
        // An object protobuf cannot carry ends the watch with an ERROR event naming why.
        return match frame(&event) {
            Ok(bytes) => Line::Event(bytes),
            Err(err) => Line::Final(encode(&error_event(status_value(&ApiError::from(err).status())), true)),
        };
    }
    Line::Event(encode(&event, false))
}

fn frame(event: &Value) -> kbind_cluster::Result<Bytes> {
    let event_type = event["type"].as_str().unwrap_or_default();
    super::protobuf::watch_frame(event_type, &event["object"]).map(Bytes::from)
}

fn error_event(status: Value) -> Value {
    json!({"type": "ERROR", "object": status})
}

fn encode(event: &Value, protobuf: bool) -> Bytes {
    if protobuf && let Ok(bytes) = frame(event) {
        return bytes;
    }
    let mut bytes = serde_json::to_vec(event).unwrap_or_default();
    bytes.push(b'\n');
    Bytes::from(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use futures::stream;

    fn identity() -> Transform {
        Box::new(|v| v)
    }

    async fn body_lines(events: Vec<kbind_cluster::Result<WatchEvent<Value>>>) -> Result<Vec<Value>, String> {
        let response = response(stream::iter(events).boxed(), identity(), false);
        let bytes = to_bytes(response.into_body(), usize::MAX)
            .await
            .map_err(|e| e.to_string())?;
        Ok(bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect())
    }

    #[tokio::test]
    async fn events_are_newline_delimited_and_end_after_an_error() {
        let lines = body_lines(vec![
            Ok(WatchEvent::Added(json!({"metadata": {"name": "a"}}))),
            Err(Error::gone("3")),
            Ok(WatchEvent::Deleted(json!({"metadata": {"name": "a"}}))),
        ])
        .await
        .unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["type"], "ADDED");
        assert_eq!(lines[1]["type"], "ERROR");
        assert_eq!(lines[1]["object"]["code"], 410);
        assert_eq!(lines[1]["object"]["reason"], "Expired");
    }

    #[tokio::test]
    async fn a_broken_watch_aborts_the_body() {
        let result = body_lines(vec![
            Ok(WatchEvent::Added(json!({}))),
            Err(Error::Transport("cut".into())),
        ])
        .await;
        assert!(result.is_err());
    }
}

//! A cap on how much of a response the kube client reads: a provider is untrusted, and a body
//! without end (or a watch line without a newline) would otherwise grow in memory until the
//! konnector, and every Connection it serves, is killed.
//!
//! A one-shot answer may be at most the cap in total; a watch is a stream that legitimately
//! outgrows any cap over hours, so there the cap applies to each event (the bytes between two
//! newlines), which is what kube buffers.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};

/// The default cap: 64 MiB, far above one page of 500 objects of a normal size, and far below
/// what would hurt a konnector pod.
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// A boxed error, the error type of the client's service stack.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body (or one watch event) went over the cap.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the server's response exceeds the limit of {limit} bytes{what}; raise --max-response-bytes if the server is trusted", what = if *.watch { " for one watch event" } else { "" })]
pub struct ResponseTooLarge {
    /// The cap in bytes.
    pub limit: u64,
    /// Whether a single watch event went over it.
    pub watch: bool,
}

/// A tower layer capping response bodies at `limit` bytes (per event for watches).
#[derive(Debug, Clone, Copy)]
pub struct ResponseLimitLayer {
    limit: u64,
}

impl ResponseLimitLayer {
    /// A layer with a cap of `limit` bytes.
    pub fn new(limit: u64) -> Self {
        Self { limit }
    }
}

impl<S> tower::Layer<S> for ResponseLimitLayer {
    type Service = ResponseLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        ResponseLimit {
            inner,
            limit: self.limit,
        }
    }
}

/// The service [`ResponseLimitLayer`] builds.
#[derive(Debug, Clone)]
pub struct ResponseLimit<S> {
    inner: S,
    limit: u64,
}

impl<S, ReqBody, ResBody> tower::Service<Request<ReqBody>> for ResponseLimit<S>
where
    S: tower::Service<Request<ReqBody>, Response = Response<ResBody>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    ResBody: Body<Data = Bytes> + Send + 'static,
    ResBody::Error: Into<BoxError>,
{
    type Response = Response<LimitedBody<ResBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let watch = is_watch(request.uri());
        let limit = self.limit;
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await.map_err(Into::into)?;
            // A declared length over the cap fails before a byte is read.
            let declared = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if !watch && declared.is_some_and(|n| n > limit) {
                return Err(Box::new(ResponseTooLarge { limit, watch }) as BoxError);
            }
            Ok(response.map(|body| LimitedBody {
                inner: Box::pin(body),
                limit,
                watch,
                seen: 0,
            }))
        })
    }
}

/// Whether a request opens a watch (`?watch=true` or `?watch=1`, as kube and kubectl send it).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// A response body that fails once more than `limit` bytes arrive (per line for watches).
pub struct LimitedBody<B> {
    inner: Pin<Box<B>>,
    limit: u64,
    watch: bool,
    /// Bytes counted so far: in total, or since the last newline of a watch.
    seen: u64,
}

impl<B> LimitedBody<B> {
    fn count(&mut self, data: &[u8]) -> Result<(), ResponseTooLarge> {
        let tail = match (self.watch, data.iter().rposition(|b| *b == b'\n')) {
            (true, Some(newline)) => {
                // Every event that ended inside this chunk must itself have fit.
                let longest = data[..newline]
                    .split(|b| *b == b'\n')
                    .enumerate()
                    .map(|(i, line)| line.len() as u64 + if i == 0 { self.seen } else { 0 })
                    .max()
                    .unwrap_or(0);
                if longest > self.limit {
                    return Err(self.too_large());
                }
                self.seen = 0;
                &data[newline + 1..]
            }
            _ => data,
        };
        self.seen = self.seen.saturating_add(tail.len() as u64);
        if self.seen > self.limit {
            return Err(self.too_large());
        }
        Ok(())
    }

    fn too_large(&self) -> ResponseTooLarge {
        ResponseTooLarge {
            limit: self.limit,
            watch: self.watch,
        }
    }
}

impl<B> Body for LimitedBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match ready!(this.inner.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref()
                    && let Err(e) = this.count(data)
                {
                    return Poll::Ready(Some(Err(Box::new(e))));
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => Poll::Ready(Some(Err(e.into()))),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(watch: bool, limit: u64) -> LimitedBody<http_body_util::Empty<Bytes>> {
        LimitedBody {
            inner: Box::pin(http_body_util::Empty::new()),
            limit,
            watch,
            seen: 0,
        }
    }

    #[test]
    fn a_one_shot_body_is_capped_in_total() {
        let mut b = body(false, 10);
        assert!(b.count(b"12345\n").is_ok());
        assert!(b.count(b"1234").is_ok());
        assert_eq!(
            b.count(b"x"),
            Err(ResponseTooLarge {
                limit: 10,
                watch: false
            })
        );
    }

    #[test]
    fn a_watch_is_capped_per_event_across_chunks() {
        let mut b = body(true, 10);
        for _ in 0..100 {
            assert!(b.count(b"123456789\n").is_ok(), "many small events are fine");
        }
        assert!(b.count(b"12345").is_ok());
        assert!(b.count(b"12345\n1").is_ok(), "ten bytes then a newline fit");
        assert!(b.count(b"234567890").is_ok());
        assert!(b.count(b"1").is_err(), "eleven bytes without a newline do not");
        let mut b = body(true, 4);
        assert!(
            b.count(b"12345\n").is_err(),
            "an event ending inside a chunk is checked too"
        );
    }

    #[test]
    fn only_watch_requests_count_as_watches() {
        assert!(is_watch(&"/api/v1/pods?watch=true&resourceVersion=1".parse().unwrap()));
        assert!(is_watch(&"/api/v1/pods?a=b&watch=1".parse().unwrap()));
        assert!(!is_watch(&"/api/v1/pods?limit=500".parse().unwrap()));
        assert!(!is_watch(&"/api/v1/namespaces/watch".parse().unwrap()));
    }
}

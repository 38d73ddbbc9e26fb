//! Captures the engine's tracing output in memory, so invariant 7 can scan it for credentials.

use std::io::Write;
use std::sync::Arc;

use parking_lot::Mutex;
use tracing_subscriber::fmt::MakeWriter;

/// A shared, growing log buffer.
#[derive(Debug, Clone, Default)]
pub struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    /// The log from byte `from` on (with the log's length now), so a check after every step
    /// scans only what the step added instead of copying the whole log each time.
    pub fn text_from(&self, from: usize) -> (String, usize) {
        let log = self.0.lock();
        let tail = log.get(from..).unwrap_or_default();
        (String::from_utf8_lossy(tail).into_owned(), log.len())
    }

    /// The last `n` lines.
    pub fn tail(&self, n: usize) -> Vec<String> {
        let text = self.text();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }

    /// Installs the capture as this thread's subscriber (the world runs on one thread).
    pub fn install(&self) -> tracing::subscriber::DefaultGuard {
        self.install_at(tracing::Level::DEBUG)
    }

    /// [`LogCapture::install`] keeping only lines at `level` or above: a herd of worlds on one
    /// thread logs into the last installed capture, and a thousand konnectors' debug lines
    /// would fill the machine's memory.
    pub fn install_at(&self, level: tracing::Level) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_ansi(false)
            .with_max_level(level)
            .without_time()
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

/// One write into the capture.
pub struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = CaptureWriter;

    fn make_writer(&'a self) -> Self::Writer {
        CaptureWriter(self.0.clone())
    }
}

//! What the tests of this binary logged at warning level and above, for tests that check what
//! the worker says: one process-wide subscriber, installed by the first test that asks.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

/// What every test of this binary logged at warning level and above (a process-wide
/// subscriber, installed once); each test looks for something of its own in it (a port, a
/// number).
pub fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&logs);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || Sink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).expect("no other global subscriber");
        logs
    })
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl Write for Sink {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The lines logged about `needle`.
pub fn logged_about(needle: &str) -> Vec<String> {
    let logs = logs().lock().unwrap();
    String::from_utf8_lossy(&logs)
        .lines()
        .filter(|line| line.contains(needle))
        .map(str::to_owned)
        .collect()
}

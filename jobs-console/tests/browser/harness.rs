//! A real headless Chromium driven through ChromeDriver (Debian's `chromium` and
//! `chromium-driver` packages), and a console served on a loopback port for it.

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use jobs_console::ConsoleConfig;
use sqlx::PgPool;

/// How long a page element may take to appear.
const ELEMENT_WAIT: Duration = Duration::from_secs(10);

/// A ChromeDriver process of the test's own, killed when dropped, and a browser session on it.
pub struct Browser {
    pub client: Client,
    driver: Child,
}

impl Browser {
    /// Starts ChromeDriver and a headless Chromium session with a 1280x900 window.
    ///
    /// Panics, saying what to install, when ChromeDriver or Chromium is missing.
    pub async fn start() -> Self {
        // The workspace builds rustls with two crypto providers (ring for NATS, aws-lc-rs for
        // the WebDriver client), so it cannot pick one by itself: ring, for the whole process.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let driver_binary = find(
            "CHROMEDRIVER",
            &["/usr/bin/chromedriver", "/usr/lib/chromium/chromedriver"],
        );
        let chromium = find(
            "CHROMIUM",
            &["/usr/bin/chromium", "/usr/bin/chromium-browser"],
        );
        let port = free_port();
        let driver = Command::new(&driver_binary)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", driver_binary.display()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            serde_json::json!({
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1280,900", "--hide-scrollbars"],
            }),
        );
        let url = format!("http://127.0.0.1:{port}");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let client = loop {
            match ClientBuilder::rustls()
                .expect("TLS roots")
                .capabilities(capabilities.clone())
                .connect(&url)
                .await
            {
                Ok(client) => break client,
                Err(error) => assert!(
                    tokio::time::Instant::now() < deadline,
                    "ChromeDriver at {url} did not open a session within 30 s: {error}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        Self { client, driver }
    }

    /// Opens `url`.
    pub async fn open(&self, url: &str) {
        self.client.goto(url).await.expect("open page");
    }

    /// Clicks the element `css` selects, waiting for it to appear.
    pub async fn click(&self, css: &str) {
        self.element(css)
            .await
            .click()
            .await
            .unwrap_or_else(|error| panic!("click {css}: {error}"));
    }

    /// Types `text` into the field `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let field = self.element(css).await;
        field.clear().await.expect("clear field");
        field.send_keys(text).await.expect("type");
    }

    /// The text of the element `css` selects, waiting for it to appear.
    pub async fn text(&self, css: &str) -> String {
        self.element(css).await.text().await.expect("read text")
    }

    /// Waits until the page's text holds `text`, reloading it between looks (a page still
    /// loading after a click is looked at again).
    pub async fn wait_for_text(&self, text: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let body = match self.client.find(Locator::Css("body")).await {
                Ok(body) => body.text().await.unwrap_or_default(),
                Err(_) => String::new(),
            };
            if body.contains(text) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the page never showed {text:?}; it shows:\n{body}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            self.client.refresh().await.expect("reload");
        }
    }

    /// Saves a PNG of the window to `target/console-screenshots/NAME.png`, and to
    /// `docs/console/NAME.png` when `JOBS_UPDATE_SCREENSHOTS` is set.
    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace");
        let mut places = vec![root.join("target/console-screenshots")];
        if std::env::var_os("JOBS_UPDATE_SCREENSHOTS").is_some() {
            places.push(root.join("docs/console"));
        }
        for dir in places {
            std::fs::create_dir_all(&dir).expect("screenshot directory");
            std::fs::write(dir.join(format!("{name}.png")), &png).expect("write screenshot");
        }
    }

    async fn element(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .wait()
            .at_most(ELEMENT_WAIT)
            .for_element(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("no element {css} on the page: {error}"))
    }

    /// Ends the session.
    pub async fn close(mut self) {
        let _ = self.client.clone().close().await;
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
    }
}

/// Serves a console over `pool` with `config` on a loopback port; returns its base URL.
pub async fn serve_console(pool: PgPool, config: ConsoleConfig) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let address = listener.local_addr().expect("address");
    let app = jobs_console::router(pool, config);
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .expect("serve console");
    });
    format!("http://{address}")
}

/// The program `variable` names, else the first of `candidates` that exists, else the one on
/// the PATH by the last candidate's file name.
fn find(variable: &str, candidates: &[&str]) -> PathBuf {
    if let Some(path) = std::env::var_os(variable) {
        return PathBuf::from(path);
    }
    if let Some(found) = candidates
        .iter()
        .map(PathBuf::from)
        .find(|path| path.exists())
    {
        return found;
    }
    panic!(
        "the browser tests need Chromium and ChromeDriver: install Debian's `chromium` and \
         `chromium-driver` packages (apt-get install chromium chromium-driver), or set {variable}; \
         tried {candidates:?}"
    );
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

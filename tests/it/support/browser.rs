//! A headless Chromium for end-to-end tests of the HTML status page: load a
//! URL, let its JavaScript run in real time (timers included), then take the
//! serialized DOM, every console message and, optionally, a PNG screenshot.
//!
//! Driven through the DevTools protocol (CDP) over a WebSocket, with the
//! minimal client written here on `TcpStream` (a reader thread feeds a channel,
//! so that every wait has a deadline). Not the one-shot flags (`--dump-dom`,
//! `--screenshot`, `--enable-logging`): they log every console message at one
//! level (an error looks like a log line), take one run per output, cannot
//! send credentials, and `--virtual-time-budget` runs timers faster than real.
//!
//! One load is one browser: a fresh temporary profile (also its XDG config
//! and cache homes: its crash database stays out of `$HOME`), its own process
//! group, off the network, a 1280x900 viewport. A drop guard closes it
//! (`Browser.close`, then `SIGKILL` to the group after 5 s) and removes the
//! directory on every path, panics included. No step waits over [`STEP`].
//!
//! Console messages are `"LEVEL: TEXT"`, in order: `console.*` calls (`log:`,
//! `info:`, `debug:`, `warning:`, `error:`, ...), uncaught exceptions and
//! unhandled rejections (`error: Uncaught Error: boom (URL:LINE:COLUMN)`,
//! `error: Uncaught (in promise) ...`), the browser's own (`error: Failed to
//! load resource: the server responded with a status of 404 (Not Found)
//! (URL)`) and failed navigations (`error: net::ERR_CONNECTION_REFUSED
//! (URL)`): [`Page::errors`] has them all. Chromium asks for `/favicon.ico`:
//! a page without `<link rel="icon" ...>` gets a 404 error there.
//!
//! [`load_with_auth`] puts `Authorization: Basic ...` on every request of the
//! page, its `fetch()` calls included (`Network.setExtraHTTPHeaders`). A
//! challenge (a 401 with `WWW-Authenticate`, without or with wrong
//! credentials) is cancelled as by a user who dismisses the login prompt, so
//! the page gets the 401 (`error: Failed to load resource: the server
//! responded with a status of 401 (Unauthorized) (URL)`); left alone, headless
//! Chromium would fail the navigation and leave a `fetch()` pending forever.

use std::io::{BufReader, Read, Write as _};
use std::net::{Shutdown, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

/// The longest any one step may take: the browser's start, a CDP command,
/// the page's load (the `wait` of [`load`] comes on top).
pub(crate) const STEP: Duration = Duration::from_secs(30);

/// Chromium's flags besides the profile and the window size: headless, as
/// root, and off the network (no background, component or sync traffic).
const FLAGS: &str = "--headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --no-default-browser-check --disable-background-networking --disable-component-update \
    --disable-sync --disable-extensions --disable-dev-shm-usage --hide-scrollbars --mute-audio \
    --remote-debugging-address=127.0.0.1 --remote-debugging-port=0";

/// The size of the viewport (and so of the screenshot), in CSS pixels.
const VIEWPORT: (u32, u32) = (1280, 900);

/// Chromium: `$MPE_CHROMIUM`, else `/usr/bin/chromium` (Debian's `chromium`
/// package), else `chromium` on `PATH`. `None` (with a notice) when there is
/// none, except under `CI=true`, where that is a failure.
pub(crate) fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("MPE_CHROMIUM").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let debian = PathBuf::from("/usr/bin/chromium");
    if debian.is_file() {
        return Some(debian);
    }
    super::tool("chromium")
}

/// What a page became after its scripts ran.
#[derive(Debug, Clone)]
pub(crate) struct Page {
    /// `document.documentElement.outerHTML` at the end of the wait.
    pub(crate) dom: String,
    /// Every console message, in order, as `"LEVEL: TEXT"` (module docs).
    pub(crate) console: Vec<String>,
}

impl Page {
    /// The messages at level `error`: `console.error`, uncaught exceptions,
    /// unhandled rejections, failed requests and navigations.
    pub(crate) fn errors(&self) -> Vec<&str> {
        let errors = self.console.iter().filter(|m| m.starts_with("error: "));
        errors.map(String::as_str).collect()
    }
}

/// Loads `url` in a fresh headless Chromium, waits until it has loaded
/// (`document.readyState` is `complete`), lets its JavaScript run for `wait`,
/// and returns the DOM and the console; writes a PNG screenshot of the
/// viewport (1280x900) to `screenshot` if given. A failed navigation is an
/// `error:` message (module docs), not a panic. Panics if the browser does
/// not start or a step takes over [`STEP`].
pub(crate) fn load(chromium: &Path, url: &str, wait: Duration, screenshot: Option<&Path>) -> Page {
    Browser::start(chromium).load(url, None, wait, screenshot)
}

/// [`load`] with HTTP basic authentication: every request of the page (the
/// page and its `fetch()` calls) carries `Authorization: Basic
/// base64(user:password)`.
pub(crate) fn load_with_auth(
    chromium: &Path,
    url: &str,
    user: &str,
    password: &str,
    wait: Duration,
    screenshot: Option<&Path>,
) -> Page {
    let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let authorization = format!("Basic {token}");
    Browser::start(chromium).load(url, Some(&authorization), wait, screenshot)
}

/// A running Chromium and its CDP connection; closed or killed, and its
/// directory removed, on drop.
struct Browser {
    child: Child,
    /// The profile (`profile/`), the XDG directories, `stderr.log`.
    dir: tempfile::TempDir,
    /// The WebSocket (for writing) and the messages from its reader thread.
    socket: Option<(TcpStream, Receiver<Value>)>,
    next_id: u64,
    /// The page's (flattened) session, once attached.
    session: Option<String>,
    console: Vec<String>,
}

impl Browser {
    /// Starts Chromium and connects to its browser endpoint.
    fn start(chromium: &Path) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("profile");
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let child = Command::new(chromium)
            .args(FLAGS.split_whitespace())
            .arg(format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1))
            .arg(format!("--user-data-dir={}", profile.display()))
            .arg("about:blank")
            .env("XDG_CONFIG_HOME", dir.path())
            .env("XDG_CACHE_HOME", dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", chromium.display()));
        let mut browser = Self {
            child,
            dir,
            socket: None,
            next_id: 0,
            session: None,
            console: Vec::new(),
        };
        // Chromium writes its port and the endpoint's path (a UUID) there.
        let deadline = Instant::now() + STEP;
        let (port, path) = loop {
            let text = std::fs::read_to_string(profile.join("DevToolsActivePort"));
            let text = text.unwrap_or_default();
            if let Some((port, path)) = text.split_once('\n') {
                let id = path.trim().strip_prefix("/devtools/browser/");
                if let (Ok(port), Some(36)) = (port.parse::<u16>(), id.map(str::len)) {
                    break (port, path.trim().to_owned());
                }
            }
            if let Ok(Some(status)) = browser.child.try_wait() {
                panic!("chromium exited ({status}):\n{}", browser.stderr());
            }
            let late = Instant::now() >= deadline;
            assert!(!late, "no DevTools port in {STEP:?}:\n{}", browser.stderr());
            std::thread::sleep(Duration::from_millis(50));
        };
        let stream = connect(port, &path);
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let messages = std::iter::from_fn(|| read_message(&mut reader));
            let _ = messages
                .filter_map(|text| serde_json::from_str(&text).ok())
                .try_for_each(|v| tx.send(v));
        });
        browser.socket = Some((stream, rx));
        browser
    }

    /// The steps of [`load`], on a new page target.
    fn load(
        mut self,
        url: &str,
        authorization: Option<&str>,
        wait: Duration,
        screenshot: Option<&Path>,
    ) -> Page {
        let target = self.call("Target.createTarget", json!({"url": "about:blank"}));
        let attach = json!({"targetId": target["targetId"], "flatten": true});
        let attached = self.call("Target.attachToTarget", attach);
        self.session = Some(attached["sessionId"].as_str().unwrap().to_owned());
        self.call("Runtime.enable", json!({}));
        self.call("Log.enable", json!({}));
        let (width, height) = VIEWPORT;
        self.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": false}),
        );
        // Every request pauses (`Fetch.requestPaused`, continued at once) so
        // that an authentication challenge comes here (`Fetch.authRequired`).
        let fetch = json!({"handleAuthRequests": true, "patterns": [{"urlPattern": "*"}]});
        self.call("Fetch.enable", fetch);
        if let Some(authorization) = authorization {
            self.call("Network.enable", json!({}));
            let headers = json!({"headers": {"Authorization": authorization}});
            self.call("Network.setExtraHTTPHeaders", headers);
        }
        let navigated = self.call("Page.navigate", json!({"url": url}));
        if let Some(error) = navigated["errorText"].as_str() {
            self.console.push(format!("error: {error} ({url})"));
        }
        // Polled rather than `Page.loadEventFired`, which may come before the
        // reply to `Page.navigate` or be the initial `about:blank`'s.
        let loaded = "document.readyState == 'complete' && location.href != 'about:blank'";
        let deadline = Instant::now() + STEP;
        while self.evaluate(loaded) != true {
            assert!(Instant::now() < deadline, "{url} not loaded in {STEP:?}");
            self.pump(None, Instant::now() + Duration::from_millis(20));
        }
        self.pump(None, Instant::now() + wait);
        let dom = self.evaluate("document.documentElement.outerHTML");
        if let Some(path) = screenshot {
            let shot = self.call("Page.captureScreenshot", json!({"format": "png"}));
            let png =
                base64::engine::general_purpose::STANDARD.decode(shot["data"].as_str().unwrap());
            std::fs::write(path, png.unwrap()).unwrap();
        }
        self.pump(None, Instant::now()); // What came with the last replies.
        let console = std::mem::take(&mut self.console);
        let dom = dom.as_str().unwrap_or_default().to_owned();
        Page { dom, console }
    }

    /// The value of a JavaScript expression in the page.
    fn evaluate(&mut self, expression: &str) -> Value {
        let params = json!({"expression": expression, "returnByValue": true});
        self.call("Runtime.evaluate", params)["result"]["value"].take()
    }

    /// Sends a command (on the page's session once attached) without waiting
    /// for its reply; returns its id.
    fn send(&mut self, method: &str, params: Value) -> std::io::Result<u64> {
        self.next_id += 1;
        let mut message = json!({"id": self.next_id, "method": method, "params": params});
        if let Some(session) = &self.session {
            message["sessionId"] = json!(session);
        }
        let (socket, _) = self
            .socket
            .as_mut()
            .ok_or(std::io::ErrorKind::NotConnected)?;
        write_message(socket, message.to_string().as_bytes())?;
        Ok(self.next_id)
    }

    /// Sends a command and returns its result, handling the events that come
    /// meanwhile; panics on a CDP error or after [`STEP`].
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params);
        let id = id.unwrap_or_else(|e| panic!("sending {method}: {e}"));
        let Some(mut reply) = self.pump(Some(id), Instant::now() + STEP) else {
            panic!("no reply to {method} in {STEP:?}:\n{}", self.stderr());
        };
        assert!(reply.get("error").is_none(), "{method}: {reply}");
        reply["result"].take()
    }

    /// Handles the events that arrive until `deadline`, or until the reply to
    /// command `id`, which it returns.
    fn pump(&mut self, id: Option<u64>, deadline: Instant) -> Option<Value> {
        loop {
            let timeout = deadline.saturating_duration_since(Instant::now());
            let message = match self.socket.as_ref()?.1.recv_timeout(timeout) {
                Ok(message) => message,
                Err(RecvTimeoutError::Timeout) => return None,
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("the DevTools connection closed:\n{}", self.stderr())
                }
            };
            if id.is_some() && message["id"].as_u64() == id {
                return Some(message);
            }
            self.event(&message);
        }
    }

    /// Records a console message, lets a paused request go on, cancels an
    /// authentication challenge; ignores other events.
    fn event(&mut self, message: &Value) {
        let p = &message["params"];
        let (level, text, at) = match message["method"].as_str().unwrap_or_default() {
            "Runtime.consoleAPICalled" => {
                let args = p["args"].as_array().into_iter().flatten();
                let text: Vec<String> = args.map(remote_object).collect();
                let level = match p["type"].as_str().unwrap_or("log") {
                    "assert" => "error",
                    level => level,
                };
                (level, text.join(" "), String::new())
            }
            "Runtime.exceptionThrown" => {
                let d = &p["exceptionDetails"];
                let mut text = d["text"].as_str().unwrap_or("Uncaught").to_owned();
                if d["exception"].is_object() {
                    let exception = remote_object(&d["exception"]);
                    text = format!("{text} {}", exception.lines().next().unwrap_or_default());
                }
                let (line, column) = (&d["lineNumber"], &d["columnNumber"]);
                let (line, column) = (line.as_u64().unwrap_or(0), column.as_u64().unwrap_or(0));
                let url = d["url"].as_str().unwrap_or_default();
                ("error", text, format!("{url}:{}:{}", line + 1, column + 1))
            }
            "Log.entryAdded" => {
                let e = &p["entry"];
                let text = e["text"].as_str().unwrap_or_default().to_owned();
                let url = e["url"].as_str().unwrap_or_default().to_owned();
                (e["level"].as_str().unwrap_or("info"), text, url)
            }
            "Fetch.requestPaused" => {
                let _ = self.send(
                    "Fetch.continueRequest",
                    json!({"requestId": p["requestId"]}),
                );
                return;
            }
            "Fetch.authRequired" => {
                // As a user who dismisses the login prompt: the 401 goes
                // through (headless Chromium would leave the request pending).
                let cancel = json!({"response": "CancelAuth"});
                let reply = json!({"requestId": p["requestId"], "authChallengeResponse": cancel});
                let _ = self.send("Fetch.continueWithAuth", reply);
                return;
            }
            _ => return,
        };
        let at = if at.is_empty() {
            at
        } else {
            format!(" ({at})")
        };
        self.console.push(format!("{level}: {text}{at}"));
    }

    /// The end of Chromium's stderr, for failure messages.
    fn stderr(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("stderr.log"));
        let text = text.unwrap_or_default();
        let lines: Vec<&str> = text.lines().filter(|l| !l.contains("dbus")).collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        self.session = None;
        let _ = self.send("Browser.close", json!({}));
        let deadline = Instant::now() + Duration::from_secs(5);
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() >= deadline {
                // Not reaped yet, so the group is still this browser's (its
                // renderers and helpers).
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", self.child.id())])
                    .stderr(Stdio::null())
                    .status();
                let _ = self.child.kill();
                let _ = self.child.wait();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if let Some((socket, _)) = &self.socket {
            let _ = socket.shutdown(Shutdown::Both); // Ends the reader thread.
        }
    }
}

/// A console argument or an exception as text: strings as they are, other
/// values as JSON, objects by their description (`Object`, `Array(2)`,
/// `Error: boom\n    at ...`).
fn remote_object(object: &Value) -> String {
    let text = object["unserializableValue"].as_str();
    let text = text.or(object["description"].as_str());
    match (&object["value"], object.get("value")) {
        (Value::String(s), _) => s.clone(),
        (_, None) => text.or(object["type"].as_str()).unwrap_or("?").to_owned(),
        (value, Some(_)) => value.to_string(),
    }
}

/// Opens the WebSocket to `ws://127.0.0.1:PORT/PATH`.
fn connect(port: u16, path: &str) -> TcpStream {
    let address = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut stream = TcpStream::connect_timeout(&address, STEP)
        .unwrap_or_else(|e| panic!("connect to the DevTools port {port}: {e}"));
    stream.set_read_timeout(Some(STEP)).unwrap();
    stream.set_write_timeout(Some(STEP)).unwrap();
    stream.set_nodelay(true).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\n\
         Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
         Sec-WebSocket-Version: 13\r\n\r\n"
    )
    .unwrap();
    // Byte by byte, so that no frame is read into a buffer here.
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") && head.len() < 16_384 {
        let mut byte = [0];
        stream.read_exact(&mut byte).expect("read the handshake");
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(
        head.starts_with("HTTP/1.1 101"),
        "handshake refused:\n{head}"
    );
    // The reader thread blocks until the drop guard shuts the socket down.
    stream.set_read_timeout(None).unwrap();
    stream
}

/// Writes one masked text frame (a client must mask; the key need not be
/// secret).
fn write_message(stream: &mut TcpStream, payload: &[u8]) -> std::io::Result<()> {
    let mut frame = vec![0x81];
    match payload.len() {
        n @ 0..126 => frame.push(0x80 | n as u8),
        n @ 126..65_536 => frame.extend([0x80 | 126, (n >> 8) as u8, n as u8]),
        n => {
            frame.push(0x80 | 127);
            frame.extend((n as u64).to_be_bytes());
        }
    }
    let since = std::time::UNIX_EPOCH.elapsed().unwrap_or_default();
    let key = (since.subsec_nanos() ^ 0x5a17_c3e1).to_be_bytes();
    frame.extend(key);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
    stream.write_all(&frame)
}

/// Reads one whole text message (continuation frames joined, pings and
/// pongs skipped); `None` once the connection is closed or broken.
fn read_message(stream: &mut impl Read) -> Option<String> {
    fn bytes<const N: usize>(stream: &mut impl Read) -> Option<[u8; N]> {
        let mut bytes = [0; N];
        stream.read_exact(&mut bytes).ok().map(|()| bytes)
    }
    let mut message = Vec::new();
    loop {
        let [first, second] = bytes(stream)?;
        let len = match second & 0x7f {
            126 => u64::from(u16::from_be_bytes(bytes(stream)?)),
            127 => u64::from_be_bytes(bytes(stream)?),
            n => u64::from(n),
        };
        let key: [u8; 4] = if second & 0x80 != 0 {
            bytes(stream)?
        } else {
            [0; 4]
        };
        let mut payload = vec![0; usize::try_from(len).ok()?];
        stream.read_exact(&mut payload).ok()?;
        match first & 0x0f {
            0x8 => return None,
            0x0..=0x2 => message.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4])),
            _ => continue,
        }
        if first & 0x80 != 0 {
            return Some(String::from_utf8_lossy(&message).into_owned());
        }
    }
}

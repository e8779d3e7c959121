//! The S3-API test server `.ci/run` starts (moto): its endpoint, and bucket creation without an SDK.

use std::io::{Read as _, Write as _};

use crate::error::{Error, Result};

/// The S3-API endpoint in `SINKPOINT_S3_ENDPOINT`. Without it a test gets `None` (and skips its S3 part), and the
/// test binary says so once ([`say_s3_skipped`]); in CI (`CI` set) a missing endpoint panics, since `.ci/run`
/// always starts the server (`source .ci/moto.sh && moto_start`).
pub fn s3_endpoint() -> Option<String> {
    let endpoint = std::env::var("SINKPOINT_S3_ENDPOINT").ok();
    if endpoint.is_none() {
        assert!(
            std::env::var("CI").is_err(),
            "CI is set but SINKPOINT_S3_ENDPOINT is not: .ci/run must start moto (source .ci/moto.sh; moto_start)"
        );
        say_s3_skipped();
    }
    endpoint
}

/// Says once per process, on its standard error itself, that the S3 cases are skipped. libtest captures what a
/// passing test prints with `eprintln!`, so a skip said that way is never seen; a write to [`std::io::stderr`] is
/// not captured, and shows in `cargo test`'s output, once per test binary.
pub fn say_s3_skipped() {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        let _ = writeln!(
            std::io::stderr(),
            "\n*** SKIP S3: SINKPOINT_S3_ENDPOINT is not set, so this binary's tests pass without their S3 cases \
             (the mirror tests run on InMemory and LocalFileSystem only). To cover S3: source .ci/moto.sh && \
             moto_start, then cargo test in that shell ***\n"
        );
    });
}

/// Creates bucket `name` on the S3-API server at `endpoint` (`http://host:port`; moto takes unsigned requests).
/// A bucket that already exists is fine.
pub fn create_s3_bucket(endpoint: &str, name: &str) -> Result<()> {
    let hostport = endpoint.trim_start_matches("http://").trim_end_matches('/');
    let io = |e: std::io::Error| {
        Error::from(std::io::Error::new(e.kind(), format!("creating bucket {name} at {endpoint}: {e}")))
    };
    let mut conn = std::net::TcpStream::connect(hostport).map_err(io)?;
    let request = format!("PUT /{name} HTTP/1.1\r\nHost: {hostport}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    conn.read_to_string(&mut answer).map_err(io)?;
    let status = answer.lines().next().unwrap_or_default();
    if status.contains(" 200") || status.contains(" 409") {
        Ok(())
    } else {
        Err(Error::from(std::io::Error::other(format!("creating bucket {name} at {endpoint}: {status}"))))
    }
}

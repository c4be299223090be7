//! The admin endpoint's client, for the CLI's subcommands (a console's
//! WebSocket is [`super::console_client`]'s): it finds the endpoint through the discovery file,
//! reads the bearer token from the token file (never from an argument or
//! the environment, so it is in no `ps` output), and speaks HTTP/1.1 over
//! loopback (hyper). Every failure is a [`ClientError`] whose message says
//! what to do: no stack running, a stale discovery file, a refused token.

use std::path::{Path, PathBuf};

use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt as _, Full};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::ErrorBody;
use super::discovery::{self, Discovery};

/// Why a request to the admin endpoint failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// There is no discovery file: no stack runs with it.
    #[error(
        "no dev stack is running: {} does not exist (start one with `devstack serve`, or point --admin-file or DEVSTACK_ADMIN at its discovery file)",
        path.display()
    )]
    NotRunning {
        /// The discovery file looked for.
        path: PathBuf,
    },
    /// The discovery file names a process that is gone.
    #[error(
        "no dev stack is running: {} names pid {pid}, which has exited (a stack that was killed leaves it behind: remove it)",
        path.display()
    )]
    Stale {
        /// The discovery file.
        path: PathBuf,
        /// The pid it names.
        pid: u32,
    },
    /// The discovery file, its directory or the token file could have been
    /// planted or changed by another user: nothing was read from the token
    /// file and nothing was sent.
    #[error("{} is not trusted: {reason}", path.display())]
    Untrusted {
        /// The discovery file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The discovery file does not parse.
    #[error("{} is not a dev stack discovery file: {reason}", path.display())]
    Discovery {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The token file cannot be read.
    #[error("the admin token file {} cannot be read: {source}", path.display())]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Nothing answers at the endpoint's address.
    #[error("no dev stack answers at {url}: {source}")]
    Unreachable {
        /// The endpoint.
        url: String,
        /// The connection error.
        source: std::io::Error,
    },
    /// The endpoint refused the token.
    #[error("the dev stack at {url} refused the admin token in {}: {message}", token_file.display())]
    Unauthorized {
        /// The endpoint.
        url: String,
        /// The token file the token came from.
        token_file: PathBuf,
        /// The endpoint's words.
        message: String,
    },
    /// The endpoint refused the request (an unknown node, a node not
    /// adopted…): `<code>: <sentence>`.
    #[error("{}{message}", if code.is_empty() { String::new() } else { format!("{code}: ") })]
    Refused {
        /// The HTTP status.
        status: u16,
        /// The stable code (empty when the endpoint gave none).
        code: String,
        /// The endpoint's words.
        message: String,
    },
    /// The exchange itself failed, or the answer is not what the API says.
    #[error("the admin endpoint at {url}: {reason}")]
    Protocol {
        /// The endpoint.
        url: String,
        /// What went wrong.
        reason: String,
    },
}

/// A client of one running stack's admin endpoint.
pub struct AdminClient {
    discovery: Discovery,
    authority: String,
    token: String,
}

impl std::fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token.
        f.debug_struct("AdminClient").field("url", &self.discovery.url).finish_non_exhaustive()
    }
}

/// The lines of a streamed answer (`events`), one JSON object each.
pub struct Lines {
    body: Incoming,
    buffer: Vec<u8>,
    url: String,
}

impl Lines {
    /// The next line; `None` when the stream ended.
    pub async fn next_line(&mut self) -> Result<Option<String>, ClientError> {
        loop {
            if let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=end).collect();
                return Ok(Some(String::from_utf8_lossy(&line[..end]).into_owned()));
            }
            match self.body.frame().await {
                None if self.buffer.is_empty() => return Ok(None),
                None => return Ok(Some(String::from_utf8_lossy(&std::mem::take(&mut self.buffer)).into_owned())),
                Some(Err(e)) => return Err(ClientError::Protocol { url: self.url.clone(), reason: e.to_string() }),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        self.buffer.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

impl AdminClient {
    /// The client of the stack the discovery file at `path` names (see
    /// [`discovery::path`]), with its token read from the token file.
    pub fn discover(path: &Path) -> Result<AdminClient, ClientError> {
        let discovery = match discovery::read_trusted(path) {
            Ok(d) => d,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ClientError::NotRunning { path: path.to_path_buf() });
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(ClientError::Untrusted { path: path.to_path_buf(), reason: e.to_string() });
            }
            Err(e) => return Err(ClientError::Discovery { path: path.to_path_buf(), reason: e.to_string() }),
        };
        if !discovery::alive(discovery.pid) {
            return Err(ClientError::Stale { path: path.to_path_buf(), pid: discovery.pid });
        }
        let authority = discovery::loopback_authority(&discovery.url)
            .ok_or_else(|| ClientError::Discovery {
                path: path.to_path_buf(),
                reason: format!("the url {:?} is not http://host:port on loopback", discovery.url),
            })?
            .to_string();
        let token = std::fs::read_to_string(&discovery.token_file)
            .map_err(|source| ClientError::TokenFile { path: discovery.token_file.clone(), source })?
            .trim()
            .to_string();
        Ok(AdminClient { discovery, authority, token })
    }

    /// What the discovery file says.
    pub fn discovery(&self) -> &Discovery {
        &self.discovery
    }

    pub(super) fn protocol(&self, reason: impl std::fmt::Display) -> ClientError {
        ClientError::Protocol { url: self.discovery.url.clone(), reason: reason.to_string() }
    }

    /// Sends one request on a fresh connection; returns the answer's status
    /// and its body (not yet read).
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<(StatusCode, Incoming), ClientError> {
        let stream =
            tokio::net::TcpStream::connect(&self.authority).await.map_err(|source| self.unreachable(source))?;
        let (mut sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.map_err(|e| self.protocol(e))?;
        tokio::spawn(async move {
            // The connection ends with the answer; its error is the answer's.
            let _ = connection.await;
        });
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.authority)
            .header(header::AUTHORIZATION, self.bearer());
        if body.is_some() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Full::new(Bytes::from(body.unwrap_or_default()))).map_err(|e| self.protocol(e))?;
        let response = sender.send_request(request).await.map_err(|e| self.protocol(e))?;
        let status = response.status();
        let body = response.into_body();
        if status.is_success() {
            return Ok((status, body));
        }
        let bytes = body.collect().await.map_err(|e| self.protocol(e))?.to_bytes();
        Err(self.refusal(status, &bytes))
    }

    /// The error of a refused request: its status and body (`{"error": …}`).
    pub(super) fn refusal(&self, status: StatusCode, body: &[u8]) -> ClientError {
        let (message, code) = serde_json::from_slice::<ErrorBody>(body)
            .map(|b| (b.error, b.code))
            .unwrap_or_else(|_| (format!("{status}: {}", String::from_utf8_lossy(body)), String::new()));
        if status == StatusCode::UNAUTHORIZED {
            return ClientError::Unauthorized {
                url: self.discovery.url.clone(),
                token_file: self.discovery.token_file.clone(),
                message,
            };
        }
        ClientError::Refused { status: status.as_u16(), code, message }
    }

    /// The endpoint's `host:port`.
    pub(super) fn authority(&self) -> &str {
        &self.authority
    }

    /// The `Authorization` header's value (a secret: never log it).
    pub(super) fn bearer(&self) -> String {
        format!("Bearer {}", self.token)
    }

    /// A failed connection to the endpoint.
    pub(super) fn unreachable(&self, source: std::io::Error) -> ClientError {
        ClientError::Unreachable { url: self.discovery.url.clone(), source }
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> Result<T, ClientError> {
        let (_, incoming) = self.send(method, path, body).await?;
        let bytes = incoming.collect().await.map_err(|e| self.protocol(e))?.to_bytes();
        serde_json::from_slice(&bytes).map_err(|e| self.protocol(format!("{path}: {e}")))
    }

    /// `GET path`, answered with JSON.
    pub async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.json(Method::GET, path, None).await
    }

    /// `POST path` with a JSON body, answered with JSON.
    pub async fn post<B: Serialize, T: DeserializeOwned>(&self, path: &str, body: &B) -> Result<T, ClientError> {
        let body = serde_json::to_vec(body).map_err(|e| self.protocol(e))?;
        self.json(Method::POST, path, Some(body)).await
    }

    /// `GET path`, answered with newline-delimited JSON read as it comes.
    pub async fn lines(&self, path: &str) -> Result<Lines, ClientError> {
        let (_, body) = self.send(Method::GET, path, None).await?;
        Ok(Lines { body, buffer: Vec::new(), url: self.discovery.url.clone() })
    }
}

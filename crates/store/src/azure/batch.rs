//! Blob Batch: up to 256 Delete Blob sub-requests in one `multipart/mixed` POST
//! ("Blob Batch", REST reference), scoped to the container
//! (`POST /container?restype=container&comp=batch`, versions 2020-04-08 and later).
//!
//! ```text
//! --batch_B                                   --batchresponse_R
//! Content-Type: application/http              Content-Type: application/http
//! Content-Transfer-Encoding: binary           Content-ID: 0
//! Content-ID: 0                               
//!                                             HTTP/1.1 202 Accepted
//! DELETE /container/blob HTTP/1.1             x-ms-request-id: ...
//! x-ms-date: ...                              
//! Authorization: SharedKey acct:sig           --batchresponse_R
//! Content-Length: 0                           ... HTTP/1.1 404 ... x-ms-error-code: BlobNotFound
//!                                             --batchresponse_R--
//! --batch_B--
//! ```
//!
//! Each sub-request is authorised on its own (Shared Key signed like a lone request
//! but without `x-ms-version`, which only the outer request carries; or the same
//! bearer token). A SAS or anonymous client cannot sign sub-requests, so it
//! deletes one request per blob instead. A sub-request answered 404 counts as deleted,
//! as the trait's delete of a missing object succeeds; any other failure is that key's
//! entry in `errors`.

use crate::azure::client::AzureClient;
use crate::azure::config::AzureCredential;
use crate::error::Error;
use crate::request::Op;
use crate::request::OpBody;
use crate::types::*;
use bytes::Bytes;
use ferry_proto::xml::DeleteError;
use http::{HeaderMap, Method};

/// Most sub-requests in one batch (Azure's limit).
pub const MAX_BATCH: usize = 256;

/// One sub-response: its Content-ID, status and error code.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SubResponse {
    pub(crate) id: usize,
    pub(crate) status: u16,
    pub(crate) code: String,
}

/// Reads the sub-responses of a `multipart/mixed` batch answer.
pub(crate) fn parse_batch_response(body: &str, boundary: &str) -> Vec<SubResponse> {
    let delimiter = format!("--{boundary}");
    let mut out = Vec::new();
    for part in body.split(delimiter.as_str()).skip(1) {
        if part.starts_with("--") {
            break;
        }
        let mut id = None;
        let mut status = None;
        let mut code = String::new();
        for line in part.split("\r\n").map(str::trim) {
            if let Some(rest) = line.strip_prefix("HTTP/1.1 ") {
                status = rest.split_whitespace().next().and_then(|s| s.parse().ok());
            } else if let Some((k, v)) = line.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "content-id" if status.is_none() => id = v.trim().parse().ok(),
                    "x-ms-error-code" => code = v.trim().to_owned(),
                    _ => {}
                }
            }
        }
        if let (Some(id), Some(status)) = (id, status) {
            out.push(SubResponse { id, status, code });
        }
    }
    out
}

impl AzureClient {
    /// Deletes `keys` in batches of [`MAX_BATCH`] (module note).
    pub async fn delete_blobs(&self, container: &str, keys: &[String]) -> Result<DeleteObjectsOutput, Error> {
        let mut out = DeleteObjectsOutput::default();
        let batched = matches!(self.config().credential, AzureCredential::SharedKey(_) | AzureCredential::Token(_));
        if !batched {
            for k in keys {
                match self.delete_blob(&ObjectRef::new(container, k.clone())).await {
                    Ok(()) => out.deleted.push(k.clone()),
                    Err(e) => out.errors.push(DeleteError {
                        key: k.clone(),
                        code: e.code().unwrap_or("Error").to_owned(),
                        message: e.to_string(),
                    }),
                }
            }
            return Ok(out);
        }
        for chunk in keys.chunks(MAX_BATCH) {
            self.delete_batch_once(container, chunk, &mut out).await?;
        }
        Ok(out)
    }

    async fn delete_batch_once(
        &self,
        container: &str,
        keys: &[String],
        out: &mut DeleteObjectsOutput,
    ) -> Result<(), Error> {
        let boundary = format!("batch_{:016x}{:016x}", rand::random::<u64>(), rand::random::<u64>());
        let mut body = String::new();
        for (i, key) in keys.iter().enumerate() {
            let path = self.path(Some(container), Some(key));
            let mut headers = HeaderMap::new();
            self.authorise(&Method::DELETE, &path, &[], &mut headers, 0, true).await?;
            body.push_str(&format!(
                "--{boundary}\r\nContent-Type: application/http\r\nContent-Transfer-Encoding: binary\r\nContent-ID: {i}\r\n\r\nDELETE {path} HTTP/1.1\r\n"
            ));
            for (n, v) in &headers {
                body.push_str(&format!("{}: {}\r\n", n.as_str(), v.to_str().unwrap_or("")));
            }
            body.push_str("Content-Length: 0\r\n\r\n");
        }
        body.push_str(&format!("--{boundary}--\r\n"));
        let mut op = Op::object("BlobBatch", Method::POST, container, None)
            .query("restype", "container")
            .query("comp", "batch")
            .header("content-type", &format!("multipart/mixed; boundary={boundary}"))?
            .body(OpBody::Bytes(Bytes::from(body)));
        // Deleting a blob twice leaves the same state.
        op.idempotent = true;
        let (text, response_boundary) = self
            .execute(&mut op, |r| async move {
                let ct = r.headers.get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
                let b = ct
                    .split(';')
                    .filter_map(|p| p.trim().strip_prefix("boundary="))
                    .next()
                    .map(|b| b.trim_matches('"').to_owned())
                    .ok_or_else(|| {
                        Error::protocol(format!("batch answer without a multipart boundary ({ct:?})"), None)
                    })?;
                let body = r.body.collect(crate::s3::object::XML_LIMIT).await?;
                Ok((String::from_utf8_lossy(&body).into_owned(), b))
            })
            .await?;
        let subs = parse_batch_response(&text, &response_boundary);
        let mut seen = vec![false; keys.len()];
        for s in subs {
            let Some(key) = keys.get(s.id) else { continue };
            seen[s.id] = true;
            if (200..300).contains(&s.status) || s.status == 404 {
                out.deleted.push(key.clone());
            } else {
                out.errors.push(DeleteError {
                    key: key.clone(),
                    code: if s.code.is_empty() { s.status.to_string() } else { s.code },
                    message: format!("Delete Blob in a batch answered {}", s.status),
                });
            }
        }
        for (_, k) in keys.iter().enumerate().filter(|(i, _)| !seen[*i]) {
            out.errors.push(DeleteError {
                key: k.clone(),
                code: "MissingSubResponse".into(),
                message: "the batch answer had no sub-response for this key".into(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sub_responses_parse() {
        let b = "batchresponse_x";
        let body = format!(
            "--{b}\r\nContent-Type: application/http\r\nContent-ID: 0\r\n\r\nHTTP/1.1 202 Accepted\r\nx-ms-request-id: a\r\n\r\n\
             --{b}\r\nContent-Type: application/http\r\nContent-ID: 1\r\n\r\nHTTP/1.1 403 Forbidden\r\nx-ms-error-code: AuthorizationFailure\r\nContent-Length: 3\r\n\r\nabc\r\n\
             --{b}--\r\n"
        );
        assert_eq!(
            parse_batch_response(&body, b),
            vec![
                SubResponse { id: 0, status: 202, code: String::new() },
                SubResponse { id: 1, status: 403, code: "AuthorizationFailure".into() }
            ]
        );
    }
}

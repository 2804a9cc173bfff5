//! List Blobs as a stream of pages, and the container calls (create, delete, list).
//!
//! Each page is one `GET /container?restype=container&comp=list` with `prefix`,
//! `delimiter`, `maxresults` (Azure's cap and default: 5,000) and the previous page's
//! `NextMarker`; the next page is asked only when the stream is polled.
//!
//! Start-after: Azure has none, and its `marker` is an opaque token the service makes
//! (a caller cannot build one from a key). So a listing with `start_after` is the
//! listing from the prefix with every key `<= start_after` dropped as pages arrive
//! (and every common prefix that sorts before it and does not contain it). That costs
//! one page request per 5,000 keys before the start: cheap for the engine's resumed
//! listings near the front, linear in the skipped keys far into a large container.
//! Pages emptied by the skip are not handed out, except the last.
//!
//! Delete Container removes a container with everything in it, where S3's DeleteBucket
//! refuses a bucket that holds objects: `delete_bucket` first lists one blob and
//! refuses with `BucketNotEmpty` (409) if there is any, keeping the trait's meaning.

use crate::azure::blocks::read_xml;
use crate::azure::client::AzureClient;
use crate::azure::object::quoted;
use crate::error::Error;
use crate::request::Op;
use crate::types::*;
use ferry_proto::encoding::parse_http_date;
use ferry_proto::xml::{Element, XmlError};
use futures_util::stream::{BoxStream, StreamExt};
use http::Method;
use std::time::SystemTime;

/// Azure's most (and default) results per List Blobs page.
pub const MAX_RESULTS: u32 = 5000;

/// One parsed page of List Blobs.
#[derive(Debug, Default)]
pub(crate) struct BlobPage {
    pub(crate) blobs: Vec<ObjectEntry>,
    pub(crate) prefixes: Vec<String>,
    pub(crate) next_marker: Option<String>,
}

fn xerr(m: &str) -> XmlError {
    XmlError { message: m.to_owned() }
}

fn time_of(e: &Element, name: &str) -> SystemTime {
    e.child_text(name).and_then(|t| parse_http_date(t.trim())).unwrap_or(SystemTime::UNIX_EPOCH)
}

/// For each `<Name` element of a listing, in document order, whether it carries
/// `Encoded="true"`: Azure percent-encodes a name that XML 1.0 cannot carry (a control
/// character) and says so with that attribute ("List Blobs", Response body), which the
/// shared XML reader does not keep. In a List Blobs answer without `include=tags`
/// `<Name>` appears only as a blob's or prefix's name, so the order matches.
fn encoded_names(body: &[u8]) -> Vec<bool> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(i) = rest.find("<Name") {
        rest = &rest[i + 5..];
        let Some(end) = rest.find('>') else { break };
        let attrs = &rest[..end];
        if attrs.is_empty() || attrs.starts_with([' ', '\t', '\r', '\n', '/']) {
            out.push(attrs.replace('\'', "\"").replace(char::is_whitespace, "").contains("Encoded=\"true\""));
        }
        rest = &rest[end..];
    }
    out
}

pub(crate) fn parse_blob_page(body: &[u8]) -> Result<BlobPage, XmlError> {
    let encoded = encoded_names(body);
    let mut names_seen = 0usize;
    let mut name_of = |raw: &str| -> String {
        let e = encoded.get(names_seen).copied().unwrap_or(false);
        names_seen += 1;
        if e {
            ferry_proto::encoding::percent_decode(raw).unwrap_or_else(|_| raw.to_owned())
        } else {
            raw.to_owned()
        }
    };
    let root = ferry_proto::xml::parse_document(body)?;
    if root.name != "EnumerationResults" {
        return Err(xerr(&format!("expected <EnumerationResults>, found <{}>", root.name)));
    }
    let mut page = BlobPage::default();
    if let Some(blobs) = root.child("Blobs") {
        for c in &blobs.children {
            match c.name.as_str() {
                "Blob" => {
                    let key = name_of(c.child_text("Name").ok_or_else(|| xerr("<Blob> without <Name>"))?);
                    let props = c.child("Properties").ok_or_else(|| xerr("<Blob> without <Properties>"))?;
                    page.blobs.push(ObjectEntry {
                        key,
                        last_modified: time_of(props, "Last-Modified"),
                        etag: quoted(props.child_text("Etag").unwrap_or("")),
                        size: props.child_text("Content-Length").and_then(|s| s.trim().parse().ok()).unwrap_or(0),
                        storage_class: props.child_text("AccessTier").unwrap_or("").to_owned(),
                        checksum_algorithm: None,
                    });
                }
                "BlobPrefix" => page
                    .prefixes
                    .push(name_of(c.child_text("Name").ok_or_else(|| xerr("<BlobPrefix> without <Name>"))?)),
                _ => {}
            }
        }
    }
    page.next_marker = root.child_text("NextMarker").map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned);
    Ok(page)
}

/// Whether a common prefix belongs after `start_after` (module note).
fn prefix_after(prefix: &str, start_after: &str) -> bool {
    prefix > start_after || start_after.starts_with(prefix)
}

struct ListState {
    client: AzureClient,
    container: String,
    params: ListParams,
    marker: Option<String>,
    done: bool,
}

impl AzureClient {
    pub(crate) async fn list_blobs_page(
        &self,
        container: &str,
        prefix: Option<&str>,
        delimiter: Option<&str>,
        marker: Option<&str>,
        max_results: Option<u32>,
        include_uncommitted: bool,
    ) -> Result<BlobPage, Error> {
        let mut op = Op::object("ListBlobs", Method::GET, container, None)
            .listing()
            .query("restype", "container")
            .query("comp", "list");
        for (k, v) in [("prefix", prefix), ("delimiter", delimiter), ("marker", marker)] {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                op = op.query(k, v);
            }
        }
        if let Some(m) = max_results {
            op = op.query("maxresults", m.clamp(1, MAX_RESULTS).to_string());
        }
        if include_uncommitted {
            op = op.query("include", "uncommittedblobs");
        }
        self.execute(&mut op, |r| async move { read_xml(r, parse_blob_page).await }).await
    }

    /// List Blobs, one page per item, start-after emulated (module note).
    pub fn list_blobs(&self, container: &str, params: ListParams) -> BoxStream<'static, Result<ListPage, Error>> {
        let st = ListState { client: self.clone(), container: container.to_owned(), params, marker: None, done: false };
        futures_util::stream::unfold(st, |mut st| async move {
            loop {
                if st.done {
                    return None;
                }
                let p = &st.params;
                let page = st
                    .client
                    .list_blobs_page(
                        &st.container,
                        p.prefix.as_deref(),
                        p.delimiter.as_deref(),
                        st.marker.as_deref(),
                        p.max_keys,
                        false,
                    )
                    .await;
                let mut page = match page {
                    Ok(p) => p,
                    Err(e) => {
                        st.done = true;
                        return Some((Err(e), st));
                    }
                };
                if page.next_marker.is_some() && page.next_marker == st.marker {
                    st.done = true;
                    return Some((Err(Error::protocol("List Blobs answered the same marker again", None)), st));
                }
                st.marker = page.next_marker.take();
                st.done = st.marker.is_none();
                if let Some(after) = st.params.start_after.as_deref() {
                    page.blobs.retain(|b| b.key.as_str() > after);
                    page.prefixes.retain(|q| prefix_after(q, after));
                    if page.blobs.is_empty() && page.prefixes.is_empty() && !st.done {
                        continue;
                    }
                }
                let out = ListPage {
                    objects: page.blobs,
                    common_prefixes: page.prefixes,
                    next_continuation_token: st.marker.clone(),
                };
                return Some((Ok(out), st));
            }
        })
        .boxed()
    }

    /// Names of blobs under `prefix`, uncommitted ones included (for `list_uploads`).
    pub(crate) async fn list_names_with_uncommitted(
        &self,
        container: &str,
        prefix: &str,
        most: usize,
    ) -> Result<Vec<String>, Error> {
        let mut names = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = self.list_blobs_page(container, Some(prefix), None, marker.as_deref(), None, true).await?;
            names.extend(page.blobs.into_iter().map(|b| b.key));
            if names.len() >= most {
                names.truncate(most);
                return Ok(names);
            }
            match page.next_marker {
                Some(m) if Some(&m) != marker.as_ref() => marker = Some(m),
                _ => return Ok(names),
            }
        }
    }

    /// Create Container (private access).
    pub async fn create_container(&self, container: &str) -> Result<(), Error> {
        let mut op = Op::object("CreateContainer", Method::PUT, container, None).query("restype", "container");
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// Set Container ACL with only a public access level: `Some("blob")` (anonymous
    /// reads of blobs), `Some("container")` (reads and listing), `None` (private).
    /// Stored access policies are not kept: the ACL becomes empty.
    pub async fn set_container_public_access(&self, container: &str, level: Option<&str>) -> Result<(), Error> {
        let mut op = Op::object("SetContainerACL", Method::PUT, container, None)
            .query("restype", "container")
            .query("comp", "acl")
            .header_opt("x-ms-blob-public-access", level)?;
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// Delete Container, refused while it holds a blob (module note).
    pub async fn delete_container(&self, container: &str) -> Result<(), Error> {
        let page = self.list_blobs_page(container, None, None, None, Some(1), false).await?;
        if !page.blobs.is_empty() {
            return Err(Error::Service {
                status: 409,
                code: "BucketNotEmpty".into(),
                message: format!("container {container} is not empty"),
                request_id: None,
            });
        }
        let mut op = Op::object("DeleteContainer", Method::DELETE, container, None).query("restype", "container");
        self.execute(&mut op, |_| async { Ok(()) }).await
    }

    /// List Containers, all pages.
    pub async fn list_containers(&self) -> Result<Vec<BucketEntry>, Error> {
        let mut out = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let mut op = Op::object("ListContainers", Method::GET, "", None).query("comp", "list");
            if let Some(m) = &marker {
                op = op.query("marker", m);
            }
            let (entries, next) = self.execute(&mut op, |r| async move { read_xml(r, parse_containers).await }).await?;
            out.extend(entries);
            match next {
                Some(m) if Some(&m) != marker.as_ref() => marker = Some(m),
                _ => return Ok(out),
            }
        }
    }
}

fn parse_containers(body: &[u8]) -> Result<(Vec<BucketEntry>, Option<String>), XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    let mut out = Vec::new();
    if let Some(cs) = root.child("Containers") {
        for c in cs.children_named("Container") {
            let name = c.child_text("Name").ok_or_else(|| xerr("<Container> without <Name>"))?.to_owned();
            let creation_date =
                c.child("Properties").map(|p| time_of(p, "Last-Modified")).unwrap_or(SystemTime::UNIX_EPOCH);
            out.push(BucketEntry { name, creation_date });
        }
    }
    let next = root.child_text("NextMarker").map(str::trim).filter(|m| !m.is_empty()).map(str::to_owned);
    Ok((out, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_parses() {
        let xml = br#"<?xml version="1.0" encoding="utf-8"?><EnumerationResults ServiceEndpoint="http://x/" ContainerName="c"><Prefix>d/</Prefix><Delimiter>/</Delimiter><Blobs><Blob><Name>d/a b</Name><Properties><Last-Modified>Fri, 27 Nov 2026 12:00:00 GMT</Last-Modified><Etag>0x8DC1</Etag><Content-Length>12</Content-Length><Content-MD5>abc=</Content-MD5></Properties></Blob><BlobPrefix><Name>d/e/</Name></BlobPrefix></Blobs><NextMarker>2!token</NextMarker></EnumerationResults>"#;
        let p = parse_blob_page(xml).unwrap();
        assert_eq!(p.blobs.len(), 1);
        assert_eq!((p.blobs[0].key.as_str(), p.blobs[0].size, p.blobs[0].etag.as_str()), ("d/a b", 12, "\"0x8DC1\""));
        assert_eq!(p.prefixes, vec!["d/e/"]);
        assert_eq!(p.next_marker.as_deref(), Some("2!token"));
        let last = parse_blob_page(b"<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>").unwrap();
        assert!(last.next_marker.is_none() && last.blobs.is_empty());
    }

    #[test]
    fn encoded_names_are_decoded() {
        let xml = br#"<EnumerationResults><Blobs><Blob><Name Encoded="true">weird%2F%01ctl</Name><Properties><Content-Length>1</Content-Length></Properties></Blob><Blob><Name>plain%01</Name><Properties/></Blob><BlobPrefix><Name Encoded='true'>d%01%2F</Name></BlobPrefix></Blobs></EnumerationResults>"#;
        let p = parse_blob_page(xml).unwrap();
        assert_eq!(p.blobs.iter().map(|b| b.key.as_str()).collect::<Vec<_>>(), vec!["weird/\u{1}ctl", "plain%01"]);
        assert_eq!(p.prefixes, vec!["d\u{1}/"]);
    }

    #[test]
    fn prefixes_after_a_start_key() {
        assert!(prefix_after("d4/", "d3/k9"));
        assert!(prefix_after("d4/", "d4/k02494"));
        assert!(!prefix_after("d3/", "d4/k02494"));
    }
}

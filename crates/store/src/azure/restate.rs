//! What a blob carries beside its bytes and its properties that a rewrite must state
//! again: its metadata names as stored, and its index tags. Used by the re-commit that
//! drops a committed blob's uncommitted blocks (blocks.rs) and by Copy Blob (object.rs).
//!
//! ```text
//! recommit:  Get Blob Properties (ETag, x-ms-tag-count)
//!              └─ List Blobs prefix=NAME maxresults=1 include=metadata[,tags]
//!                   └─ the <Blob> named NAME with that ETag ─► metadata as stored, tags
//! copy:      Get Blob Properties of the source (ETag, x-ms-tag-count)
//!              └─ x-ms-tag-count > 0 ─► Get Blob Tags ?comp=tags ─► x-ms-tags on Copy Blob
//! ```
//!
//! Metadata names. Azure keeps a metadata name's case as it was sent and compares names
//! without regard to case ("Set Blob Metadata"), but hands them back as HTTP header
//! names, which ferry's HTTP stack holds lower-cased; only a listing (`include=metadata`,
//! one element per name) shows the stored case. Sending is the harder half: a header
//! map holds names lower-cased and the HTTP/1.1 client writes them so (its
//! case-preserving map is not public), and Azure takes metadata names only from request
//! headers. So a commit from ferry writes every name lower case: one that is stored
//! with a capital letter cannot be kept, and the re-commit refuses rather than rename it.
//! The listing's entry is taken only when its ETag is the one the properties were read
//! with: otherwise the blob changed in between and the caller is told so (412). (The
//! listing takes the SAS permission `l`, as finding the uploads to discard does.)
//!
//! Index tags. A commit (Put Block List) and Copy Blob set exactly the tags their
//! `x-ms-tags` header names, none when it is absent ("Put Block List", "Copy Blob"), so
//! both restate the tags read. Setting tags does not change a blob's ETag ("Set Blob
//! Tags"), so the re-commit also sends `x-ms-if-tags` naming every tag read with its
//! value: a tag changed or removed meanwhile fails the commit (412) instead of being
//! written back; one added meanwhile is not seen by the condition and would be dropped
//! (one round trip of exposure). Tag keys and values hold only letters, digits, space
//! and `+ - . / : = _` ("Manage and find data with blob index tags"), so neither needs
//! quoting inside the condition. Reading tags takes the SAS permission `t`; a copy of a
//! tagged blob by a client that may not read them fails and says so instead of copying
//! the blob without its tags.

use crate::azure::blocks::read_xml;
use crate::azure::client::AzureClient;
use crate::azure::object::quoted;
use crate::error::Error;
use crate::request::Op;
use crate::types::ObjectRef;
use ferry_proto::encoding::uri_encode;
use ferry_proto::xml::{Element, XmlError};
use http::Method;

/// `(key, value)` pairs, in the order the service gave them.
pub(crate) type Pairs = Vec<(String, String)>;

/// What a listing says of one blob that its properties' headers cannot.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Listed {
    /// Metadata, each name as stored.
    pub(crate) metadata: Pairs,
    /// Index tags (empty unless the listing asked for them).
    pub(crate) tags: Pairs,
}

/// The tags of a `<Tags><TagSet><Tag><Key/><Value/></Tag>...` element.
fn tag_set(tags: &Element) -> Pairs {
    let Some(set) = tags.child("TagSet") else { return Vec::new() };
    set.children_named("Tag")
        .map(|t| (t.child_text("Key").unwrap_or("").to_owned(), t.child_text("Value").unwrap_or("").to_owned()))
        .collect()
}

/// A Get Blob Tags answer.
pub(crate) fn parse_tags(body: &[u8]) -> Result<Pairs, XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    if root.name != "Tags" {
        return Err(XmlError { message: format!("expected <Tags>, found <{}>", root.name) });
    }
    Ok(tag_set(&root))
}

/// The entry for `key` with ETag `etag` in a List Blobs answer, if it holds one. A name
/// Azure had to percent-encode (`Encoded="true"`, list.rs) is matched decoded.
pub(crate) fn parse_listed(body: &[u8], key: &str, etag: &str) -> Result<Option<Listed>, XmlError> {
    let root = ferry_proto::xml::parse_document(body)?;
    let Some(blobs) = root.child("Blobs") else { return Ok(None) };
    for b in blobs.children_named("Blob") {
        let name = b.child_text("Name").unwrap_or("");
        let named = name == key || ferry_proto::encoding::percent_decode(name).is_ok_and(|n| n == key);
        let same = b.child("Properties").and_then(|p| p.child_text("Etag")).is_some_and(|e| quoted(e) == quoted(etag));
        if named && same {
            let metadata = b
                .child("Metadata")
                .map(|m| m.children.iter().map(|e| (e.name.clone(), e.text.clone())).collect())
                .unwrap_or_default();
            let tags = b.child("Tags").map(tag_set).unwrap_or_default();
            return Ok(Some(Listed { metadata, tags }));
        }
    }
    Ok(None)
}

/// The `x-ms-tags` value that sets `tags`: query-string encoded.
pub(crate) fn tags_header(tags: &[(String, String)]) -> String {
    tags.iter().map(|(k, v)| format!("{}={}", uri_encode(k, true), uri_encode(v, true))).collect::<Vec<_>>().join("&")
}

/// The `x-ms-if-tags` condition that holds while every one of `tags` has its value.
pub(crate) fn if_tags_header(tags: &[(String, String)]) -> String {
    tags.iter().map(|(k, v)| format!("\"{k}\" = '{v}'")).collect::<Vec<_>>().join(" AND ")
}

/// How many index tags a blob's properties say it has.
pub(crate) fn tag_count(props: &http::HeaderMap) -> u64 {
    props.get("x-ms-tag-count").and_then(|v| v.to_str().ok()).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

impl AzureClient {
    /// Get Blob Tags.
    pub(crate) async fn blob_tags(&self, object: &ObjectRef) -> Result<Pairs, Error> {
        let mut op = Op::object("GetBlobTags", Method::GET, &object.bucket, Some(&object.key)).query("comp", "tags");
        self.execute(&mut op, |r| async move { read_xml(r, parse_tags).await }).await
    }

    /// The listing's entry for `object` as it stands with `etag` (module note); `None`
    /// when the listing shows no such blob with that ETag (it changed, or went).
    pub(crate) async fn listed(
        &self,
        object: &ObjectRef,
        etag: &str,
        with_tags: bool,
    ) -> Result<Option<Listed>, Error> {
        let include = if with_tags { "metadata,tags" } else { "metadata" };
        // The blob itself sorts first among the names it prefixes.
        let mut op = Op::object("ListBlobs", Method::GET, &object.bucket, None)
            .query("restype", "container")
            .query("comp", "list")
            .query("prefix", &object.key)
            .query("maxresults", "1")
            .query("include", include);
        let (key, etag) = (object.key.clone(), etag.to_owned());
        self.execute(&mut op, move |r| {
            let (key, etag) = (key.clone(), etag.clone());
            async move { read_xml(r, |b| parse_listed(b, &key, &etag)).await }
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &[u8] = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><EnumerationResults ContainerName=\"c\"><Prefix>m.txt</Prefix><Blobs><Blob><Name>m.txt</Name><Properties><Etag>0x22FF</Etag><Content-Length>6</Content-Length><TagCount>2</TagCount></Properties><Metadata><OwnerName>Lab</OwnerName><Name>x</Name></Metadata><Tags><TagSet><Tag><Key>Project</Key><Value>a b</Value></Tag><Tag><Key>tier</Key><Value>2</Value></Tag></TagSet></Tags></Blob></Blobs><NextMarker/></EnumerationResults>";

    #[test]
    fn a_listing_gives_metadata_names_as_stored_and_tags_for_the_same_etag_only() {
        let l = parse_listed(LISTING, "m.txt", "\"0x22FF\"").unwrap().unwrap();
        let pairs = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Pairs>();
        assert_eq!(l.metadata, pairs(&[("OwnerName", "Lab"), ("Name", "x")]));
        assert_eq!(l.tags, pairs(&[("Project", "a b"), ("tier", "2")]));
        assert_eq!(parse_listed(LISTING, "m.txt", "\"0x3000\"").unwrap(), None, "another ETag: changed meanwhile");
        assert_eq!(parse_listed(LISTING, "m.tx", "\"0x22FF\"").unwrap(), None, "another name");
    }

    #[test]
    fn tags_are_sent_query_encoded_and_conditioned_on_every_value() {
        let tags = vec![("Project".to_owned(), "a b".to_owned()), ("k".to_owned(), "x=1/2".to_owned())];
        assert_eq!(tags_header(&tags), "Project=a%20b&k=x%3D1%2F2");
        assert_eq!(if_tags_header(&tags), "\"Project\" = 'a b' AND \"k\" = 'x=1/2'");
        let body =
            b"<?xml version=\"1.0\"?><Tags><TagSet><Tag><Key>Project</Key><Value>a b</Value></Tag></TagSet></Tags>";
        assert_eq!(parse_tags(body).unwrap(), tags[..1].to_vec());
        assert!(parse_tags(b"<Error/>").is_err());
    }
}

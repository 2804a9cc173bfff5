//! The service- and bucket-level listings beside ListObjectsV2: ListBuckets, and
//! ListMultipartUploads (followed over its key/upload-id markers), which a resumed upload
//! uses to find the upload it left. Specs: S3 API Reference, ListBuckets and
//! ListMultipartUploads.

use crate::error::Error;
use crate::request::Op;
use crate::s3::client::S3Client;
use crate::s3::object::read_xml;
use crate::types::*;
use ferry_proto::client_xml::{parse_list_buckets, parse_list_multipart_uploads};
use http::Method;

pub use ferry_proto::xml::UploadEntry;

/// Most pages one [`S3Client::list_multipart_uploads`] follows: 1,000 uploads each, so a
/// million uploads under one prefix; a server whose markers never end cannot loop.
const MAX_UPLOAD_PAGES: usize = 1_000;

impl S3Client {
    /// ListBuckets: the buckets these credentials can see.
    pub async fn list_buckets(&self) -> Result<Vec<BucketEntry>, Error> {
        // An empty bucket name addresses the service (`GET /`).
        let mut op = Op::object("ListBuckets", Method::GET, "", None);
        let r = self.execute(&mut op, |r| async move { read_xml(r, parse_list_buckets).await }).await?;
        Ok(r.buckets.into_iter().map(|(name, creation_date)| BucketEntry { name, creation_date }).collect())
    }

    /// ListMultipartUploads: the uploads in progress whose key starts with `prefix`, all
    /// pages, in the server's order (key, then initiation time).
    pub async fn list_multipart_uploads(&self, bucket: &str, prefix: &str) -> Result<Vec<UploadEntry>, Error> {
        let mut out = Vec::new();
        let mut markers: Option<(String, String)> = None;
        for _ in 0..MAX_UPLOAD_PAGES {
            let mut op = Op::object("ListMultipartUploads", Method::GET, bucket, None).query("uploads", "");
            if !prefix.is_empty() {
                op = op.query("prefix", prefix);
            }
            if let Some((k, u)) = &markers {
                op = op.query("key-marker", k).query("upload-id-marker", u);
            }
            let page =
                self.execute(&mut op, |r| async move { read_xml(r, parse_list_multipart_uploads).await }).await?;
            out.extend(page.uploads);
            let next = (page.next_key_marker, page.next_upload_id_marker);
            if !page.is_truncated {
                return Ok(out);
            }
            if next.0.is_empty() || markers.as_ref() == Some(&next) {
                return Err(Error::protocol("a truncated upload listing whose markers do not advance", None));
            }
            markers = Some(next);
        }
        Err(Error::protocol(format!("more than {MAX_UPLOAD_PAGES} pages of multipart uploads"), None))
    }
}

//! ListObjectsV2 as a stream of pages.
//!
//! Each page is one request; the next is sent only when the caller asks for it
//! (backpressure, and a caller that stops early sends no more requests). Continuation
//! tokens are followed until `IsTruncated` is false. `encoding-type=url` is always
//! requested, so keys that XML 1.0 cannot carry (control characters) arrive intact, and
//! `ferry_proto::xml::parse_list_objects_v2` decodes them.
//! Spec: S3 API Reference, ListObjectsV2.

use crate::error::Error;
use crate::request::Op;
use crate::s3::client::S3Client;
use crate::s3::object::read_xml;
use crate::types::*;
use futures_util::stream::{BoxStream, StreamExt};
use http::Method;

pub use ferry_proto::xml::ObjectEntry;

struct ListState {
    client: S3Client,
    bucket: String,
    params: ListParams,
    token: Option<String>,
    done: bool,
}

impl S3Client {
    /// ListObjectsV2, one page per item, following continuation tokens.
    pub fn list_objects_v2(&self, bucket: &str, params: ListParams) -> BoxStream<'static, Result<ListPage, Error>> {
        let state = ListState { client: self.clone(), bucket: bucket.to_owned(), params, token: None, done: false };
        futures_util::stream::unfold(state, |mut st| async move {
            if st.done {
                return None;
            }
            let page = st.client.list_page(&st.bucket, &st.params, st.token.as_deref()).await;
            match page {
                Ok(p) => {
                    st.token = p.next_continuation_token.clone();
                    st.done = st.token.is_none();
                    Some((Ok(p), st))
                }
                Err(e) => {
                    st.done = true;
                    Some((Err(e), st))
                }
            }
        })
        .boxed()
    }

    async fn list_page(&self, bucket: &str, params: &ListParams, token: Option<&str>) -> Result<ListPage, Error> {
        let mut op = Op::object("ListObjectsV2", Method::GET, bucket, None)
            .listing()
            .query("list-type", "2")
            .query("encoding-type", "url");
        if let Some(t) = token {
            op = op.query("continuation-token", t);
        }
        if let Some(p) = &params.prefix {
            op = op.query("prefix", p);
        }
        if let Some(d) = &params.delimiter {
            op = op.query("delimiter", d);
        }
        if let Some(s) = &params.start_after {
            op = op.query("start-after", s);
        }
        if let Some(m) = params.max_keys {
            op = op.query("max-keys", m.to_string());
        }
        let r = self
            .execute(&mut op, |r| async move { read_xml(r, ferry_proto::xml::parse_list_objects_v2).await })
            .await?;
        let next = if r.is_truncated {
            match r.next_continuation_token {
                Some(t) if !t.is_empty() => Some(t),
                _ => return Err(Error::protocol("a truncated listing without NextContinuationToken", None)),
            }
        } else {
            None
        };
        Ok(ListPage { objects: r.contents, common_prefixes: r.common_prefixes, next_continuation_token: next })
    }
}

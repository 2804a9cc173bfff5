//! `objects.list` as a stream of pages, in S3's listing model.
//!
//! Each page is one request, sent when the caller polls for it; `nextPageToken` is
//! followed until absent. The mapping:
//!
//! - `start_after` (exclusive, what the engine's key-range-parallel listing splits on)
//!   becomes `startOffset` (inclusive) and the one object named exactly `start_after`
//!   is dropped from the answer, so the semantics stay S3's.
//! - With a delimiter, GCS may repeat a prefix on more than one page (fake-gcs-server
//!   does); a prefix not greater than the last one handed out is dropped, so each comes
//!   once, in order.
//! - The parts of multipart-equivalent uploads live under [`HIDDEN_PREFIX`]
//!   (upload.rs); listings that do not ask for that prefix leave them out, as S3's
//!   listings leave out parts.

use crate::error::Error;
use crate::gcs::client::{enc, GcsClient};
use crate::gcs::object::entry_from_json;
use crate::gcs::upload::HIDDEN_PREFIX;
use crate::request::Op;
use crate::types::*;
use futures_util::stream::{BoxStream, StreamExt};
use http::Method;

struct ListState {
    client: GcsClient,
    bucket: String,
    params: ListParams,
    token: Option<String>,
    last_prefix: Option<String>,
    done: bool,
}

impl GcsClient {
    /// One page per item, following page tokens.
    pub fn list_objects(&self, bucket: &str, params: ListParams) -> BoxStream<'static, Result<ListPage, Error>> {
        let st = ListState {
            client: self.clone(),
            bucket: bucket.to_owned(),
            params,
            token: None,
            last_prefix: None,
            done: false,
        };
        futures_util::stream::unfold(st, |mut st| async move {
            if st.done {
                return None;
            }
            match st.client.list_page(&st.bucket, &st.params, st.token.as_deref()).await {
                Ok((mut page, token)) => {
                    page.common_prefixes.retain(|p| st.last_prefix.as_ref().is_none_or(|l| p > l));
                    if let Some(l) = page.common_prefixes.last() {
                        st.last_prefix = Some(l.clone());
                    }
                    st.token = token.clone();
                    st.done = token.is_none();
                    page.next_continuation_token = token;
                    Some((Ok(page), st))
                }
                Err(e) => {
                    st.done = true;
                    Some((Err(e), st))
                }
            }
        })
        .boxed()
    }

    async fn list_page(
        &self,
        bucket: &str,
        params: &ListParams,
        token: Option<&str>,
    ) -> Result<(ListPage, Option<String>), Error> {
        let op = Op::path("objects.list", Method::GET, format!("/storage/v1/b/{}/o", enc(bucket)))
            .listing()
            .query_opt("prefix", params.prefix.clone())
            .query_opt("delimiter", params.delimiter.clone())
            .query_opt("startOffset", params.start_after.clone())
            // GCS's default page is 1,000 items; stated, so every server pages alike.
            .query("maxResults", params.max_keys.unwrap_or(1000).to_string())
            .query_opt("pageToken", token.map(str::to_owned));
        let mut op = op;
        let v = self.execute(&mut op, |r| async move { Self::read_json(r).await }).await?;
        let internal = params.prefix.as_deref().is_some_and(|p| p.starts_with(HIDDEN_PREFIX));
        let visible = |k: &str| internal || !k.starts_with(HIDDEN_PREFIX);
        let after = params.start_after.as_deref();
        let objects = v["items"]
            .as_array()
            .map(|a| {
                a.iter().map(entry_from_json).filter(|e| visible(&e.key) && Some(e.key.as_str()) != after).collect()
            })
            .unwrap_or_default();
        let common_prefixes = v["prefixes"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|p| p.as_str())
                    .filter(|p| visible(p) && Some(*p) != after)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
        let token = v["nextPageToken"].as_str().filter(|t| !t.is_empty()).map(str::to_owned);
        Ok((ListPage { objects, common_prefixes, next_continuation_token: None }, token))
    }
}

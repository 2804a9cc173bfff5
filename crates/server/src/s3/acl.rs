//! Access control lists, as far as this server has them: every bucket and object is
//! private to the one owner the server knows.
//!
//! Tools read and set ACLs in passing (the AWS CLI's `s3api get-bucket-acl`, rclone's
//! and s5cmd's `--acl private`, SDK test suites), so the four ACL operations answer
//! instead of 501: a GET returns the owner's FULL_CONTROL grant (the canned ACL
//! `private`), a PUT accepts `private` (as `x-amz-acl`, or as a body granting exactly
//! that) and refuses anything else with S3's own answer for a bucket whose ACLs are
//! disabled, `AccessControlListNotSupported`, saying what is kept.

use super::{owner, read_xml, xml_response, Route, S3Error};
use crate::app::App;
use crate::types::{Request, Response};
use ferry_proto::xml;

pub async fn get_bucket(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    Ok(xml_response(xml::private_acl(&owner())))
}

pub async fn get_object(app: &App, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_object(route.bucket(), route.key()).await?;
    Ok(xml_response(xml::private_acl(&owner())))
}

pub async fn put_bucket(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_bucket(route.bucket()).await?;
    check_private(app, req).await?;
    Ok(Response::new(200))
}

pub async fn put_object(app: &App, req: &mut Request, route: &Route) -> Result<Response, S3Error> {
    app.backend.head_object(route.bucket(), route.key()).await?;
    check_private(app, req).await?;
    Ok(Response::new(200))
}

fn not_supported(what: &str) -> S3Error {
    S3Error::new(
        400,
        "AccessControlListNotSupported",
        &format!(
            "The bucket does not allow ACLs: ferry serve keeps every bucket and object private to its owner and accepts only the canned ACL 'private' ({what} refused)."
        ),
    )
}

/// Accepts a request that asks for `private` and nothing else.
async fn check_private(app: &App, req: &mut Request) -> Result<(), S3Error> {
    if let Some(grant) = req.headers.keys().find(|h| h.as_str().starts_with("x-amz-grant-")) {
        return Err(not_supported(grant.as_str()));
    }
    let canned = req.headers.get("x-amz-acl").map(|v| v.to_str().unwrap_or("").trim().to_string());
    let body = read_xml(app, req).await?;
    if let Some(c) = canned {
        if c != "private" {
            return Err(not_supported(&format!("canned ACL '{c}'")));
        }
        return Ok(());
    }
    if body.iter().all(u8::is_ascii_whitespace) {
        return Err(S3Error::new(
            400,
            "MissingSecurityHeader",
            "Your request was missing a required header: x-amz-acl, or an AccessControlPolicy body.",
        ));
    }
    let doc = xml::parse_document(&body).map_err(|_| S3Error::malformed_xml())?;
    if doc.name != "AccessControlPolicy" {
        return Err(S3Error::malformed_xml());
    }
    let me = owner();
    let grants: Vec<_> =
        doc.child("AccessControlList").map(|l| l.children_named("Grant").collect()).unwrap_or_default();
    let only_owner_full_control = grants.len() == 1 && {
        let g = grants[0];
        g.child_text("Permission").map(str::trim) == Some("FULL_CONTROL")
            && g.child("Grantee").and_then(|e| e.child_text("ID")).map(str::trim) == Some(me.id.as_str())
    };
    if !only_owner_full_control {
        return Err(not_supported("a grant other than the owner's FULL_CONTROL"));
    }
    Ok(())
}

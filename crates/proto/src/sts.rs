//! STS `AssumeRoleWithWebIdentity`: the request's form parameters and the XML answer,
//! written by `ferry serve` and read by the client's web identity credentials.
//!
//! The call is AWS's Query protocol: form parameters (`Action`, `Version`, `RoleArn`,
//! `RoleSessionName`, `WebIdentityToken`, optionally `DurationSeconds`) in the query
//! string of a GET or the urlencoded body of a POST, unsigned (the token is the proof).
//! The answer nests the keys in `AssumeRoleWithWebIdentityResult/Credentials`; a failure
//! is an `ErrorResponse/Error` with `Code` and `Message`
//! (<https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html>).

use std::time::SystemTime;

use crate::encoding::parse_iso8601;
use crate::xml::{parse_document, XmlError, XmlWriter};

/// The action name, and the API version every STS request carries.
pub const ASSUME_ROLE_WITH_WEB_IDENTITY: &str = "AssumeRoleWithWebIdentity";
pub const VERSION: &str = "2011-06-15";
/// Namespace of STS answers.
pub const STS_XMLNS: &str = "https://sts.amazonaws.com/doc/2011-06-15/";

/// Temporary keys as STS hands them out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TemporaryCredentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: String,
    pub expiration: SystemTime,
}

/// The form parameters of an AssumeRoleWithWebIdentity call, in the order the SDKs send
/// them (any order is accepted).
pub fn web_identity_params<'a>(
    role_arn: &'a str,
    session_name: &'a str,
    token: &'a str,
) -> [(&'static str, &'a str); 5] {
    [
        ("Action", ASSUME_ROLE_WITH_WEB_IDENTITY),
        ("Version", VERSION),
        ("RoleArn", role_arn),
        ("RoleSessionName", session_name),
        ("WebIdentityToken", token),
    ]
}

/// The successful answer.
pub fn web_identity_result_xml(
    creds: &TemporaryCredentials,
    role_arn: &str,
    session_name: &str,
    request_id: &str,
) -> String {
    let mut w = XmlWriter::new();
    w.open_root_ns("AssumeRoleWithWebIdentityResponse", STS_XMLNS);
    w.open("AssumeRoleWithWebIdentityResult");
    w.open("Credentials")
        .leaf("AccessKeyId", &creds.access_key_id)
        .leaf("SecretAccessKey", &creds.secret_access_key)
        .leaf("SessionToken", &creds.session_token)
        .leaf("Expiration", &crate::encoding::iso8601(creds.expiration))
        .close("Credentials");
    w.open("AssumedRoleUser")
        .leaf("Arn", &format!("{role_arn}/{session_name}"))
        .leaf("AssumedRoleId", &creds.access_key_id)
        .close("AssumedRoleUser");
    w.close("AssumeRoleWithWebIdentityResult");
    w.open("ResponseMetadata").leaf("RequestId", request_id).close("ResponseMetadata");
    w.close("AssumeRoleWithWebIdentityResponse");
    w.finish()
}

/// An STS error answer.
pub fn error_xml(code: &str, message: &str, request_id: &str) -> String {
    let mut w = XmlWriter::new();
    w.open_root_ns("ErrorResponse", STS_XMLNS);
    w.open("Error").leaf("Type", "Sender").leaf("Code", code).leaf("Message", message).close("Error");
    w.leaf("RequestId", request_id);
    w.close("ErrorResponse");
    w.finish()
}

/// Reads a successful answer's keys.
pub fn parse_web_identity_result(body: &[u8]) -> Result<TemporaryCredentials, XmlError> {
    let root = parse_document(body)?;
    let err = |m: String| XmlError { message: m };
    if root.name != "AssumeRoleWithWebIdentityResponse" {
        return Err(err(format!("expected <AssumeRoleWithWebIdentityResponse>, found <{}>", root.name)));
    }
    let creds = root
        .child("AssumeRoleWithWebIdentityResult")
        .and_then(|r| r.child("Credentials"))
        .ok_or_else(|| err("no <AssumeRoleWithWebIdentityResult><Credentials>".into()))?;
    let field = |name: &str| {
        creds
            .child_text(name)
            .map(|t| t.trim().to_owned())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| err(format!("<Credentials> without <{name}>")))
    };
    let expiration = field("Expiration")?;
    Ok(TemporaryCredentials {
        access_key_id: field("AccessKeyId")?,
        secret_access_key: field("SecretAccessKey")?,
        session_token: field("SessionToken")?,
        expiration: parse_iso8601(&expiration)
            .ok_or_else(|| err(format!("<Expiration> is not an ISO 8601 time: {expiration:?}")))?,
    })
}

/// `(Code, Message)` of an error answer, when the body is one.
pub fn parse_error(body: &[u8]) -> Option<(String, String)> {
    let root = parse_document(body).ok()?;
    let e = if root.name == "Error" { &root } else { root.child("Error")? };
    Some((e.child_text("Code")?.trim().to_owned(), e.child_text("Message").unwrap_or("").trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn answers_round_trip() {
        let creds = TemporaryCredentials {
            access_key_id: "ASIAEXAMPLE".into(),
            secret_access_key: "s/e+c=r&t".into(),
            session_token: "tok<en>".into(),
            expiration: UNIX_EPOCH + Duration::from_secs(1_700_000_000),
        };
        let xml = web_identity_result_xml(&creds, "arn:aws:iam::123:role/r", "sess", "REQ1");
        assert_eq!(parse_web_identity_result(xml.as_bytes()).unwrap(), creds);
        let e = error_xml("InvalidIdentityToken", "the token is empty", "REQ2");
        assert_eq!(parse_error(e.as_bytes()), Some(("InvalidIdentityToken".into(), "the token is empty".into())));
        assert!(parse_web_identity_result(e.as_bytes()).is_err());
    }

    /// The shape AWS documents, namespace and all.
    #[test]
    fn reads_the_documented_answer() {
        let xml = r#"<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">
  <AssumeRoleWithWebIdentityResult>
    <SubjectFromWebIdentityToken>amzn1.account.AF6RHO7KZU5XRVQJGXK6HB56KR2A</SubjectFromWebIdentityToken>
    <Audience>client.5498841531868486423.1548@apps.example.com</Audience>
    <AssumedRoleUser>
      <Arn>arn:aws:sts::123456789012:assumed-role/FederatedWebIdentityRole/app1</Arn>
      <AssumedRoleId>AROACLKWSDQRAOEXAMPLE:app1</AssumedRoleId>
    </AssumedRoleUser>
    <Credentials>
      <SessionToken>AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE</SessionToken>
      <SecretAccessKey>wJalrXUtnFEMI/K7MDENG/bPxRfiCYzEXAMPLEKEY</SecretAccessKey>
      <Expiration>2014-10-24T23:00:23Z</Expiration>
      <AccessKeyId>ASgeIAIOSFODNN7EXAMPLE</AccessKeyId>
    </Credentials>
    <Provider>www.amazon.com</Provider>
  </AssumeRoleWithWebIdentityResult>
  <ResponseMetadata>
    <RequestId>ad4156e9-bce1-11e2-82e6-6b6efEXAMPLE</RequestId>
  </ResponseMetadata>
</AssumeRoleWithWebIdentityResponse>"#;
        let c = parse_web_identity_result(xml.as_bytes()).unwrap();
        assert_eq!(c.access_key_id, "ASgeIAIOSFODNN7EXAMPLE");
        assert_eq!(c.session_token, "AQoDYXdzEE0a8ANXXXXXXXXNO1ewxE5TijQyp+IEXAMPLE");
        assert_eq!(c.expiration, parse_iso8601("2014-10-24T23:00:23Z").unwrap());
    }
}

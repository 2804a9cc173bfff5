//! STS `AssumeRoleWithWebIdentity` and `AssumeRole`: the requests' form parameters and
//! the XML answers, written by `ferry serve` and read by the client's web identity and
//! assume-role credentials.
//!
//! Both calls are AWS's Query protocol: form parameters (`Action`, `Version`, `RoleArn`,
//! `RoleSessionName`, optionally `DurationSeconds`) in the query string of a GET or the
//! urlencoded body of a POST. AssumeRoleWithWebIdentity adds `WebIdentityToken` and is
//! sent unsigned (the token is the proof); AssumeRole (optionally with `ExternalId`) is
//! signed with SigV4 for service `sts` by the caller's own keys. The answer nests the keys
//! in `<Action>Result/Credentials` inside `<Action>Response`; a failure is an
//! `ErrorResponse/Error` with `Code` and `Message`
//! (<https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRoleWithWebIdentity.html>,
//! <https://docs.aws.amazon.com/STS/latest/APIReference/API_AssumeRole.html>).

use std::time::SystemTime;

use crate::encoding::parse_iso8601;
use crate::xml::{parse_document, XmlError, XmlWriter};

/// The action name, and the API version every STS request carries.
pub const ASSUME_ROLE_WITH_WEB_IDENTITY: &str = "AssumeRoleWithWebIdentity";
pub const ASSUME_ROLE: &str = "AssumeRole";
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

/// The form parameters of an AssumeRole call (`ExternalId` only when given).
pub fn assume_role_params<'a>(
    role_arn: &'a str,
    session_name: &'a str,
    external_id: Option<&'a str>,
) -> Vec<(&'static str, &'a str)> {
    let mut p =
        vec![("Action", ASSUME_ROLE), ("Version", VERSION), ("RoleArn", role_arn), ("RoleSessionName", session_name)];
    if let Some(id) = external_id {
        p.push(("ExternalId", id));
    }
    p
}

/// The successful answer to AssumeRoleWithWebIdentity.
pub fn web_identity_result_xml(
    creds: &TemporaryCredentials,
    role_arn: &str,
    session_name: &str,
    request_id: &str,
) -> String {
    result_xml(ASSUME_ROLE_WITH_WEB_IDENTITY, creds, role_arn, session_name, request_id)
}

/// The successful answer to `action` (either of the two).
pub fn result_xml(
    action: &str,
    creds: &TemporaryCredentials,
    role_arn: &str,
    session_name: &str,
    request_id: &str,
) -> String {
    let (response, result) = (format!("{action}Response"), format!("{action}Result"));
    let mut w = XmlWriter::new();
    w.open_root_ns(&response, STS_XMLNS);
    w.open(&result);
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
    w.close(&result);
    w.open("ResponseMetadata").leaf("RequestId", request_id).close("ResponseMetadata");
    w.close(&response);
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

/// Reads a successful AssumeRoleWithWebIdentity answer's keys.
pub fn parse_web_identity_result(body: &[u8]) -> Result<TemporaryCredentials, XmlError> {
    parse_result(ASSUME_ROLE_WITH_WEB_IDENTITY, body)
}

/// Reads the keys of a successful answer to `action`.
pub fn parse_result(action: &str, body: &[u8]) -> Result<TemporaryCredentials, XmlError> {
    let root = parse_document(body)?;
    let err = |m: String| XmlError { message: m };
    if root.name != format!("{action}Response") {
        return Err(err(format!("expected <{action}Response>, found <{}>", root.name)));
    }
    let creds = root
        .child(&format!("{action}Result"))
        .and_then(|r| r.child("Credentials"))
        .ok_or_else(|| err(format!("no <{action}Result><Credentials>")))?;
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
        let xml = result_xml(ASSUME_ROLE, &creds, "arn:aws:iam::123:role/r", "sess", "REQ1");
        assert_eq!(parse_result(ASSUME_ROLE, xml.as_bytes()).unwrap(), creds);
        assert!(parse_web_identity_result(xml.as_bytes()).is_err(), "an AssumeRole answer read as the other");
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

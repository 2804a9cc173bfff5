//! ferry-proto: S3 wire formats shared by ferry's server and client.
//!
//! No sockets live here; every module is a pure transformation over bytes,
//! strings and `http` types, so both sides of the wire share one
//! implementation and one set of tests:
//!
//! - [`encoding`]: SigV4 URI encoding, query strings, timestamps;
//! - [`checksum`]: flexible checksum algorithms, ETags, composite checksums;
//! - [`sigv4`]: request signing and verification;
//! - [`sigv2`]: the legacy signature S3 still accepts (botocore presigns with it);
//! - [`chunked`]: HTTP/1.1 chunked and S3 aws-chunked body decoders;
//! - [`range`]: `Range` / `Content-Range` with S3 semantics;
//! - [`xml`]: S3 XML bodies, writers and parsers;
//! - [`client_xml`]: parsers for the XML answers the client reads;
//! - [`sts`]: STS AssumeRoleWithWebIdentity and AssumeRole, their parameters and answers.

pub mod checksum;
pub mod chunked;
pub mod client_xml;
pub mod encoding;
pub mod range;
pub mod sigv2;
pub mod sigv4;
pub mod sts;
pub mod xml;

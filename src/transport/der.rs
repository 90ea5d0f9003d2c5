//! Just enough DER to find a certificate's SubjectPublicKeyInfo (RFC 5280
//! §4.1), the input of an SPKI pin (PROTOCOL.md §1.2a).
//!
//! It owns the walk Certificate → tbsCertificate → subjectPublicKeyInfo and
//! nothing else: it never interprets a key, a name or a date, and it never
//! trusts a certificate — it is only applied to a leaf that the web PKI
//! verifier has already accepted. It accepts only definite, minimally
//! encoded lengths and never reads past its input.

/// `SEQUENCE` (constructed).
const TAG_SEQUENCE: u8 = 0x30;
/// `INTEGER`.
const TAG_INTEGER: u8 = 0x02;
/// `[0] EXPLICIT` (constructed, context-specific 0): the certificate version.
const TAG_VERSION: u8 = 0xa0;

/// Why the walk failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DerError {
    /// The input ended inside a tag, length or value.
    Truncated,
    /// A tag other than the one the structure requires here.
    UnexpectedTag,
    /// An indefinite, over-long or non-minimal length.
    BadLength,
    /// Bytes after the outer `Certificate` SEQUENCE.
    TrailingData,
}

/// One tag-length-value element.
struct Element<'a> {
    tag: u8,
    /// The whole encoding: tag, length and value.
    whole: &'a [u8],
    /// The value.
    value: &'a [u8],
}

/// Splits the first element off `input`; returns it and the rest.
fn next_element(input: &[u8]) -> Result<(Element<'_>, &[u8]), DerError> {
    let (&tag, after_tag) = input.split_first().ok_or(DerError::Truncated)?;
    // Multi-byte (high) tag numbers never occur in the fields walked here.
    if tag & 0x1f == 0x1f {
        return Err(DerError::UnexpectedTag);
    }
    let (&first, after_first) = after_tag.split_first().ok_or(DerError::Truncated)?;
    let (length, after_length) = if first < 0x80 {
        (usize::from(first), after_first)
    } else {
        let count = usize::from(first & 0x7f);
        // 0x80 is the indefinite form (BER only); more than four length
        // bytes would describe more than 4 GiB.
        if count == 0 || count > 4 {
            return Err(DerError::BadLength);
        }
        let digits = after_first.get(..count).ok_or(DerError::Truncated)?;
        if digits[0] == 0 {
            return Err(DerError::BadLength);
        }
        let length = digits
            .iter()
            .fold(0usize, |acc, &d| (acc << 8) | usize::from(d));
        if length < 0x80 {
            return Err(DerError::BadLength);
        }
        (length, &after_first[count..])
    };
    let value = after_length.get(..length).ok_or(DerError::Truncated)?;
    let header_len = input.len() - after_length.len();
    let whole = &input[..header_len + length];
    Ok((Element { tag, whole, value }, &after_length[length..]))
}

/// Splits the first element off `input`, requiring `tag`.
fn expect(input: &[u8], tag: u8) -> Result<(Element<'_>, &[u8]), DerError> {
    let (element, rest) = next_element(input)?;
    if element.tag != tag {
        return Err(DerError::UnexpectedTag);
    }
    Ok((element, rest))
}

/// The DER encoding (tag, length and value) of the SubjectPublicKeyInfo of
/// the X.509 certificate `certificate`.
///
/// ```text
/// Certificate ::= SEQUENCE { tbsCertificate, signatureAlgorithm, signature }
/// TBSCertificate ::= SEQUENCE {
///     version [0] EXPLICIT Version DEFAULT v1,   -- optional
///     serialNumber INTEGER, signature AlgorithmIdentifier,
///     issuer Name, validity Validity, subject Name,
///     subjectPublicKeyInfo SubjectPublicKeyInfo, ... }
/// ```
pub fn subject_public_key_info(certificate: &[u8]) -> Result<&[u8], DerError> {
    let (outer, rest) = expect(certificate, TAG_SEQUENCE)?;
    if !rest.is_empty() {
        return Err(DerError::TrailingData);
    }
    let (tbs, _) = expect(outer.value, TAG_SEQUENCE)?;
    let mut fields = tbs.value;
    if fields.first() == Some(&TAG_VERSION) {
        let (_, rest) = next_element(fields)?;
        fields = rest;
    }
    let (_, rest) = expect(fields, TAG_INTEGER)?; // serialNumber
    let (_, rest) = expect(rest, TAG_SEQUENCE)?; // signature
    let (_, rest) = expect(rest, TAG_SEQUENCE)?; // issuer
    let (_, rest) = expect(rest, TAG_SEQUENCE)?; // validity
    let (_, rest) = expect(rest, TAG_SEQUENCE)?; // subject
    let (spki, _) = expect(rest, TAG_SEQUENCE)?;
    Ok(spki.whole)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// Wraps `value` in a TLV with `tag`, choosing the length form.
    fn tlv(tag: u8, value: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        let len = value.len();
        if len < 0x80 {
            out.push(len as u8);
        } else if len < 0x100 {
            out.extend([0x81, len as u8]);
        } else {
            out.extend([0x82, (len >> 8) as u8, len as u8]);
        }
        out.extend_from_slice(value);
        out
    }

    fn certificate(with_version: bool, spki: &[u8]) -> Vec<u8> {
        let mut tbs = Vec::new();
        if with_version {
            tbs.extend(tlv(TAG_VERSION, &tlv(TAG_INTEGER, &[2])));
        }
        tbs.extend(tlv(TAG_INTEGER, &[0x01, 0x23]));
        tbs.extend(tlv(TAG_SEQUENCE, &tlv(0x06, &[1, 2, 3])));
        tbs.extend(tlv(TAG_SEQUENCE, b"issuer"));
        tbs.extend(tlv(TAG_SEQUENCE, b"validity"));
        tbs.extend(tlv(TAG_SEQUENCE, b"subject"));
        tbs.extend_from_slice(spki);
        tbs.extend(tlv(0xa3, b"extensions"));
        let mut cert = tlv(TAG_SEQUENCE, &tbs);
        cert.extend(tlv(TAG_SEQUENCE, b"sigalg"));
        cert.extend(tlv(0x03, b"signature"));
        tlv(TAG_SEQUENCE, &cert)
    }

    #[test]
    fn the_spki_is_found_with_and_without_the_version_field() {
        let spki = tlv(TAG_SEQUENCE, &[0x55; 300]);
        for with_version in [true, false] {
            let cert = certificate(with_version, &spki);
            assert_eq!(subject_public_key_info(&cert).unwrap(), &spki[..]);
        }
    }

    #[test]
    fn every_truncation_is_refused_without_panicking() {
        let cert = certificate(true, &tlv(TAG_SEQUENCE, &[7; 20]));
        for end in 0..cert.len() {
            assert!(subject_public_key_info(&cert[..end]).is_err(), "{end}");
        }
    }

    #[test]
    fn trailing_bytes_and_wrong_tags_are_refused() {
        let mut cert = certificate(true, &tlv(TAG_SEQUENCE, &[7; 20]));
        cert.push(0);
        assert_eq!(subject_public_key_info(&cert), Err(DerError::TrailingData));
        let not_a_sequence = certificate(true, &tlv(0x04, &[7; 20]));
        assert_eq!(
            subject_public_key_info(&not_a_sequence),
            Err(DerError::UnexpectedTag)
        );
    }

    #[test]
    fn non_minimal_and_indefinite_lengths_are_refused() {
        assert_eq!(
            next_element(&[0x30, 0x80, 0x00, 0x00]).err(),
            Some(DerError::BadLength)
        );
        assert_eq!(
            next_element(&[0x30, 0x81, 0x05, 1, 2, 3, 4, 5]).err(),
            Some(DerError::BadLength)
        );
        assert_eq!(
            next_element(&[0x30, 0x82, 0x00, 0x80]).err(),
            Some(DerError::BadLength)
        );
        assert_eq!(
            next_element(&[0x30, 0x85, 1, 0, 0, 0, 0]).err(),
            Some(DerError::BadLength)
        );
        assert_eq!(
            next_element(&[0x1f, 0x01, 0x00]).err(),
            Some(DerError::UnexpectedTag)
        );
    }
}

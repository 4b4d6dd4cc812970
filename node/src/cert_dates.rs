//! When an X.509 certificate expires, read from its DER without a parser crate: the
//! walk from the certificate to its `validity` is four fields long (RFC 5280, 4.1), and
//! nothing else of the certificate is read. Used for what a verification cannot say:
//! the end of a certificate that does not verify against the client CA.

const SEQUENCE: u8 = 0x30;
const INTEGER: u8 = 0x02;
/// `[0] EXPLICIT Version`, present from version 2 on.
const VERSION: u8 = 0xa0;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;

/// The `notAfter` of the DER certificate `der` (the last second it is valid), in seconds
/// since the Unix epoch; `None` when `der` is not a certificate (a field missing, of
/// another type, or running past its container; a `notBefore` that is not a time).
pub fn not_after(der: &[u8]) -> Option<i64> {
    let (certificate, _) = element(der, SEQUENCE)?;
    let (mut tbs, _) = element(certificate, SEQUENCE)?;
    if tbs.first() == Some(&VERSION) {
        tbs = element(tbs, VERSION)?.1;
    }
    let (_serial, rest) = element(tbs, INTEGER)?;
    let (_signature, rest) = element(rest, SEQUENCE)?;
    let (_issuer, rest) = element(rest, SEQUENCE)?;
    let (validity, _) = element(rest, SEQUENCE)?;
    let (_not_before, rest) = time(validity)?;
    Some(time(rest)?.0)
}

/// The contents of the element at the start of `der` if its tag is `tag`, and what
/// follows it.
fn element(der: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    let (&found, rest) = der.split_first()?;
    if found != tag {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (len, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        // Long form: the low bits count the length's bytes; four cover any certificate.
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let len = rest[..count]
            .iter()
            .fold(0usize, |len, &b| (len << 8) | usize::from(b));
        (len, &rest[count..])
    };
    (rest.len() >= len).then(|| rest.split_at(len))
}

/// A `Time` (UTCTime or GeneralizedTime, in the `Z` form DER requires) at the start of
/// `der`, as Unix seconds, and what follows it.
fn time(der: &[u8]) -> Option<(i64, &[u8])> {
    let (year, text, rest) = match *der.first()? {
        UTC_TIME => {
            let (text, rest) = element(der, UTC_TIME)?;
            // RFC 5280, 4.1.2.5.1: two-digit years from 50 are 19xx, below are 20xx.
            let yy = digits(text.get(..2)?)?;
            let year = if yy >= 50 { 1900 + yy } else { 2000 + yy };
            (year, text.get(2..)?, rest)
        }
        GENERALIZED_TIME => {
            let (text, rest) = element(der, GENERALIZED_TIME)?;
            (digits(text.get(..4)?)?, text.get(4..)?, rest)
        }
        _ => return None,
    };
    // MMDDHHMMSSZ
    if text.len() != 11 || text[10] != b'Z' {
        return None;
    }
    let field = |i: usize| digits(&text[i..i + 2]);
    let (month, day) = (field(0)?, field(2)?);
    let (hour, minute, second) = (field(4)?, field(6)?, field(8)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 {
        return None;
    }
    // A leap second (60) is allowed by the syntax.
    if second > 60 {
        return None;
    }
    let days = days_from_civil(year, month, day);
    Some((days * 86_400 + hour * 3_600 + minute * 60 + second, rest))
}

/// The number an ASCII run of decimal digits spells.
fn digits(text: &[u8]) -> Option<i64> {
    text.iter().try_fold(0i64, |n, &c| {
        c.is_ascii_digit().then(|| n * 10 + i64::from(c - b'0'))
    })
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar
/// (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let year_of_era = y - era * 400;
    let month_from_march = (month + 9) % 12;
    let day_of_year = (153 * month_from_march + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;
    use ledger_test_cluster::certs::{Ca, Validity};

    #[test]
    fn reads_the_end_rcgen_wrote_in_both_time_forms() {
        let ca = Ca::new("dates");
        // rcgen writes years before 2050 as UTCTime, later ones as GeneralizedTime.
        let until = |validity| not_after(&ca.leaf("n", validity).der);
        assert_eq!(until(Validity::Current), Some(4_102_358_400)); // 2099-12-31
        assert_eq!(until(Validity::Expired), Some(978_307_200)); // 2001-01-01
        assert_eq!(until(Validity::Until(2080)), Some(3_471_292_800));
        // A two-digit year from 50 on is of the 1900s (RFC 5280, 4.1.2.5.1).
        assert_eq!(until(Validity::Until(1999)), Some(915_148_800));
        assert_eq!(until(Validity::Until(2049)), Some(2_493_072_000));
    }

    #[test]
    fn calendar_days_match_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(2024, 2, 29), 19_782);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }

    #[test]
    fn anything_but_a_certificate_reads_as_none_without_a_panic() {
        let der = Ca::new("dates").leaf("n", Validity::Current).der;
        assert_eq!(not_after(b""), None);
        assert_eq!(not_after(b"not a certificate"), None);
        for cut in 0..der.len() {
            assert_eq!(not_after(&der[..cut]), None, "cut at {cut}");
        }
        // Every byte replaced by values that make lengths long, short, indefinite or
        // huge, tags wrong and digits letters: whatever it reads, it reads in bounds.
        for at in 0..der.len() {
            for value in [0x00, 0x05, 0x7f, 0x80, 0x81, 0x84, 0x85, 0xff, b'x'] {
                let mut bad = der.clone();
                bad[at] = value;
                let _ = not_after(&bad);
            }
        }
        // A letter where a digit of the end belongs.
        let at = der
            .windows(15)
            .position(|w| w == b"20991231000000Z")
            .expect("rcgen writes notAfter as GeneralizedTime");
        let mut bad = der.clone();
        bad[at + 5] = b'x';
        assert_eq!(not_after(&bad), None);
        // The inner lengths are checked against their containers, not only the outer:
        // the validity's length made long form, two bytes (0x170d, past the certificate).
        let not_before = der
            .windows(15)
            .position(|w| w == b"\x17\x0d000101000000Z")
            .expect("rcgen writes notBefore as UTCTime");
        let (mut bad, validity) = (der.clone(), not_before - 2);
        assert_eq!(bad[validity], SEQUENCE);
        bad[validity + 1] = 0x82;
        assert_eq!(not_after(&bad), None);
    }
}

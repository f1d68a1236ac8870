//! The INI dialect of the AWS shared config and credentials files, read the way the AWS CLI
//! (Python's `configparser`) reads them: `[section]` headers, `name = value` or `name: value`
//! split at the first delimiter (values may contain `=`, as session tokens do), option names
//! case-insensitive, whole-line `#` and `;` comments, no inline comments, and lines indented
//! deeper than the previous option continuing its value (the nested `s3 =` blocks), which
//! deadbolt never needs.

use std::collections::HashMap;

/// Options of one section, names lower-cased.
pub type Section = HashMap<String, String>;

/// The sections of `text` by name (whitespace inside a header collapsed to one space, so
/// `[profile  x]` is `profile x`). A section given twice gets the options of both, the later
/// one winning.
pub fn parse(text: &str) -> HashMap<String, Section> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut sections: HashMap<String, Section> = HashMap::new();
    let mut current: Option<String> = None;
    // Indentation of the section's last option: deeper lines continue its value.
    let mut option_indent: Option<usize> = None;
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with(';') {
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        if option_indent.is_some_and(|at| indent > at) {
            continue;
        }
        if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
            let name = header.split_whitespace().collect::<Vec<_>>().join(" ");
            sections.entry(name.clone()).or_default();
            current = Some(name);
            option_indent = None;
            continue;
        }
        let Some(section) = &current else {
            // Options before any header belong to no profile.
            continue;
        };
        let Some(at) = trimmed.find(['=', ':']) else {
            continue;
        };
        option_indent = Some(indent);
        let name = trimmed[..at].trim().to_ascii_lowercase();
        let value = trimmed[at + 1..].trim().to_owned();
        if let Some(options) = sections.get_mut(section) {
            options.insert(name, value);
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_profiles_as_the_aws_cli_does() {
        let text = "\u{feff}# comment\n\
            orphan = 1\n\
            [default]\n\
            aws_access_key_id = AKIDDEFAULT\n\
            AWS_Secret_Access_Key=s3cr/t+key\n\
            ; another comment\n\
            [profile   ci]\n\
            region: eu-west-1\n\
            aws_session_token = IQoJb3JpZ2luX2Vj==\n\
            s3 =\n  max_concurrent_requests = 10\n\
            note = a # not a comment\n\
            [indented]\n  aws_access_key_id = AKIDINDENTED\n  region = us-west-2\n";
        let s = parse(text);
        assert_eq!(s["default"]["aws_access_key_id"], "AKIDDEFAULT");
        assert_eq!(s["default"]["aws_secret_access_key"], "s3cr/t+key");
        assert_eq!(s["profile ci"]["region"], "eu-west-1");
        assert_eq!(s["profile ci"]["aws_session_token"], "IQoJb3JpZ2luX2Vj==");
        assert_eq!(s["profile ci"]["s3"], "");
        assert!(!s["profile ci"].contains_key("max_concurrent_requests"));
        assert_eq!(s["profile ci"]["note"], "a # not a comment");
        assert!(!s.values().any(|o| o.contains_key("orphan")));
        assert_eq!(s["indented"]["aws_access_key_id"], "AKIDINDENTED");
        assert_eq!(s["indented"]["region"], "us-west-2");
    }

    #[test]
    fn a_section_given_twice_merges_with_the_later_winning() {
        let s = parse("[a]\nx = 1\ny = 1\n[b]\n[a]\ny = 2\n");
        assert_eq!((s["a"]["x"].as_str(), s["a"]["y"].as_str()), ("1", "2"));
        assert!(s["b"].is_empty());
    }
}

//! What a `dynamodb://` URL and the connect options say: the table, where it is (region,
//! endpoint), its key schema and how locks are released. Checked before any I/O; no message
//! ever repeats a credential.

use super::credentials::AwsCredentials;
use super::item;
use super::permit_item;

/// Shortest and longest DynamoDB table name.
const TABLE_NAME_BYTES: std::ops::RangeInclusive<usize> = 3..=255;
/// Longest key attribute name DynamoDB accepts, in bytes.
const MAX_KEY_ATTRIBUTE_BYTES: usize = 255;
/// Longest sort key value DynamoDB accepts, in bytes.
pub const MAX_SORT_KEY_VALUE_BYTES: usize = 1024;

/// A sort key: the lock table's range key attribute and the value every lock of this client
/// uses, so that the lock named `name` is the item (`name`, `value`) (a Java lock client on a
/// table with a sort key names its locks by both).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SortKey {
    /// Attribute name of the sort key.
    pub name: String,
    /// Its value in every lock item this client writes or reads.
    pub value: String,
}

/// DynamoDB settings from the connect options.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct DynamoOptions {
    /// Create the table on first use if it does not exist (on-demand billing). Default false.
    pub create_table: bool,
    /// Partition key attribute name. Default `key`, as the Java lock client.
    pub partition_key: String,
    /// Sort key, if the table has one. Default none.
    pub sort_key: Option<SortKey>,
    /// Release by deleting the item (the Java client's default) instead of marking it
    /// released (`isReleased`). Deleting also drops the fencing counter. Default false.
    pub delete_on_release: bool,
    /// Credentials to sign with instead of the environment's. Default none.
    pub credentials: Option<AwsCredentials>,
}

impl Default for DynamoOptions {
    fn default() -> Self {
        Self {
            create_table: false,
            partition_key: item::DEFAULT_PARTITION_KEY.to_owned(),
            sort_key: None,
            delete_on_release: false,
            credentials: None,
        }
    }
}

// Every field, so that a new one must be considered here: credentials appear as a per-process
// fingerprint only.
crate::store::redact::debug_fields!(DynamoOptions {
    create_table,
    partition_key,
    sort_key,
    delete_on_release,
    credentials,
});

impl DynamoOptions {
    /// Checks the key schema: attribute names DynamoDB accepts that are not one of the lock or
    /// semaphore items' own attributes, and a sort key value DynamoDB accepts.
    pub fn check(&self) -> Result<(), String> {
        check_key_attribute(&self.partition_key, "partitionKey")?;
        if let Some(sort) = &self.sort_key {
            check_key_attribute(&sort.name, "sortKey.name")?;
            if sort.name == self.partition_key {
                return Err("sortKey.name must differ from partitionKey".into());
            }
            if sort.value.is_empty() || sort.value.len() > MAX_SORT_KEY_VALUE_BYTES {
                return Err(format!(
                    "sortKey.value must be 1 to {MAX_SORT_KEY_VALUE_BYTES} bytes"
                ));
            }
        }
        Ok(())
    }
}

fn check_key_attribute(name: &str, option: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_KEY_ATTRIBUTE_BYTES {
        return Err(format!(
            "{option} must be 1 to {MAX_KEY_ATTRIBUTE_BYTES} bytes"
        ));
    }
    if item::LOCK_ATTRIBUTES.contains(&name) || permit_item::ATTRIBUTES.contains(&name) {
        return Err(format!(
            "{option} must not be {name:?}: the lock or semaphore items use that attribute"
        ));
    }
    Ok(())
}

/// A parsed `dynamodb://<table>?region=…&endpoint=…` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// Table name.
    pub table: String,
    /// Region from the URL, if it names one.
    pub region: Option<String>,
    /// Endpoint from the URL (`http://127.0.0.1:8000` for a local server), if it names one.
    pub endpoint: Option<String>,
}

impl Location {
    /// Parses a `dynamodb://` URL. Table names keep their case (DynamoDB's are case
    /// sensitive), so the URL is not read as a host name.
    pub fn parse(url: &str) -> Result<Location, String> {
        let rest = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("dynamodb") => rest,
            _ => return Err("the URL must start with dynamodb://".into()),
        };
        if rest.contains('#') {
            return Err("the URL must not have a #fragment".into());
        }
        let (table, query) = rest.split_once('?').unwrap_or((rest, ""));
        let table = table.strip_suffix('/').unwrap_or(table);
        if !TABLE_NAME_BYTES.contains(&table.len())
            || !table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        {
            return Err(
                "the table name (dynamodb://<table>) must be 3 to 255 letters, digits, '_', '-' or '.'"
                    .into(),
            );
        }
        let mut location = Location {
            table: table.to_owned(),
            region: None,
            endpoint: None,
        };
        for (name, value) in form_urlencoded::parse(query.as_bytes()) {
            let slot = match name.as_ref() {
                "region" => &mut location.region,
                "endpoint" => &mut location.endpoint,
                other => {
                    return Err(format!(
                        "unknown URL parameter {other:?} (dynamodb:// takes region and endpoint)"
                    ))
                }
            };
            if slot.is_some() {
                return Err(format!("the URL names {name} twice"));
            }
            *slot = Some(value.into_owned());
        }
        if let Some(region) = &location.region {
            check_region(region)?;
        }
        if let Some(endpoint) = &location.endpoint {
            check_endpoint(endpoint)?;
        }
        Ok(location)
    }
}

/// Region names are lower-case letters, digits and dashes (`us-east-1`); they become part of
/// a host name.
pub fn check_region(region: &str) -> Result<(), String> {
    let ok = !region.is_empty()
        && region.len() <= 64
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if ok {
        Ok(())
    } else {
        Err("the region must be a name such as us-east-1".into())
    }
}

fn check_endpoint(endpoint: &str) -> Result<(), String> {
    let url =
        reqwest::Url::parse(endpoint).map_err(|e| format!("the endpoint is not a URL ({e})"))?;
    let usable = matches!(url.scheme(), "http" | "https")
        && url.host_str().is_some_and(|h| !h.is_empty())
        && url.username().is_empty()
        && url.password().is_none()
        && url.path() == "/"
        && url.query().is_none();
    if usable {
        Ok(())
    } else {
        Err("the endpoint must be http://host[:port] or https://host[:port], with no path".into())
    }
}

/// The regional endpoint DynamoDB answers on.
pub fn default_endpoint(region: &str) -> String {
    // The China regions live under their own domain.
    let domain = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    format!("https://dynamodb.{region}.{domain}")
}

//! The URL of an etcd store: `etcd://[user:password@]host:port[,host:port…]` (`etcds://` for
//! TLS). The members are tried in order; user and password (percent-encoded) are etcd's auth.

use super::client::Credentials;

/// Port of a member given without one.
pub const DEFAULT_PORT: u16 = 2379;

/// What an etcd URL says.
#[derive(Debug, Clone)]
pub struct Location {
    /// `http(s)://host:port` of each member.
    pub endpoints: Vec<String>,
    /// The members' host names (what a certificate is checked against).
    pub hosts: Vec<String>,
    /// Whether the URL is `etcds://`.
    pub tls: bool,
    /// etcd auth, if the URL names a user.
    pub credentials: Option<Credentials>,
}

impl Location {
    /// Parses `url`. Errors never quote the URL (it may hold a password).
    pub fn parse(url: &str) -> Result<Location, String> {
        let (scheme, rest) = url
            .split_once("://")
            .ok_or("the URL must start with etcd:// or etcds://")?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "etcd" => false,
            "etcds" => true,
            _ => return Err("the URL must start with etcd:// or etcds://".into()),
        };
        // Nothing after the members is used: a path or query is refused, not ignored.
        let authority = rest.trim_end_matches('/');
        if authority.contains(['/', '?', '#']) {
            return Err(
                "an etcd URL names members only: etcd://host:2379[,host:2379…] \
                 (no path or query)"
                    .into(),
            );
        }
        let (userinfo, members) = match authority.rsplit_once('@') {
            Some((u, m)) => (Some(u), m),
            None => (None, authority),
        };
        let credentials = match userinfo {
            None => None,
            Some(u) => {
                let (user, password) = u.split_once(':').unwrap_or((u, ""));
                let decode = |s: &str| -> Result<String, String> {
                    form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
                        .next()
                        .map(|(_, v)| v.into_owned())
                        .ok_or_else(|| "the URL's user or password is not percent-encoded".into())
                };
                let user = decode(user)?;
                if user.is_empty() {
                    return Err("the URL names a password without a user".into());
                }
                Some(Credentials {
                    user,
                    password: decode(password)?,
                })
            }
        };
        let mut endpoints = Vec::new();
        let mut hosts = Vec::new();
        for member in members.split(',') {
            if member.is_empty() {
                return Err("the URL names an empty member (etcd://host:2379[,host:2379…])".into());
            }
            let (host, port) = split_port(member)?;
            let scheme = if tls { "https" } else { "http" };
            endpoints.push(format!("{scheme}://{host}:{port}"));
            hosts.push(host.to_owned());
        }
        Ok(Location {
            endpoints,
            hosts,
            tls,
            credentials,
        })
    }
}

/// `host[:port]`, with IPv6 hosts in brackets.
fn split_port(member: &str) -> Result<(&str, u16), String> {
    let bad = || format!("{member:?} is not host:port");
    let (host, port) = if let Some(rest) = member.strip_prefix('[') {
        let (inside, after) = rest.split_once(']').ok_or_else(bad)?;
        let host = &member[..inside.len() + 2];
        match after.strip_prefix(':') {
            Some(p) => (host, Some(p)),
            None if after.is_empty() => (host, None),
            None => return Err(bad()),
        }
    } else {
        match member.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (member, None),
        }
    };
    if host.is_empty() {
        return Err(bad());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().map_err(|_| bad())?,
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_user_and_password_are_read_from_the_url() {
        let l = Location::parse("etcds://app:p%40ss+word@a:2379,[::1]:32379,b").unwrap();
        assert_eq!(
            l.endpoints,
            ["https://a:2379", "https://[::1]:32379", "https://b:2379"]
        );
        assert!(l.tls);
        let c = l.credentials.unwrap();
        assert_eq!((c.user.as_str(), c.password.as_str()), ("app", "p@ss+word"));
        assert!(!format!("{c:?}").contains("p@ss"));
    }

    #[test]
    fn a_path_or_query_is_refused_without_quoting_the_url() {
        let err = Location::parse("etcd://u:secret@h:2379/x?y=1").unwrap_err();
        assert!(!err.contains("secret"), "{err}");
        assert!(Location::parse("etcd://h:notaport").is_err());
        assert!(Location::parse("etcd://a,,b").is_err());
    }
}

//! Where the credentials and the region come from, in the AWS SDKs' order: the connect
//! options, then the environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
//! `AWS_SESSION_TOKEN`), then the shared credentials and config files for the profile
//! `AWS_PROFILE` (default `default`). Only static keys: roles, SSO, `credential_process` and the
//! container or instance endpoints need the AWS SDK's credential chain, which deadbolt does
//! not carry; such a profile is refused with a message that says so.
//!
//! Messages name variables, files and profiles, never a key.

use super::ini;
use std::fmt;
use std::path::PathBuf;

/// Static AWS credentials. `Debug` shows a per-process fingerprint, never the keys.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct AwsCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl AwsCredentials {
    /// A fingerprint of the credentials under keys drawn once per process: it tells two sets
    /// apart within this process and means nothing outside it.
    pub fn fingerprint(&self) -> String {
        crate::store::redact::fingerprint(self)
    }
}

impl fmt::Debug for AwsCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AwsCredentials")
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

/// Reads environment variables: the process environment, or a table in tests.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment, with empty variables read as unset (as the AWS SDKs do).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The credentials to sign with: `explicit` (the connect options) if given, else the
/// environment's, else the profile's.
pub fn resolve_credentials(
    explicit: Option<&AwsCredentials>,
    env: Env<'_>,
) -> Result<AwsCredentials, String> {
    if let Some(c) = explicit {
        return Ok(c.clone());
    }
    match (env("AWS_ACCESS_KEY_ID"), env("AWS_SECRET_ACCESS_KEY")) {
        (Some(access_key_id), Some(secret_access_key)) => {
            return Ok(AwsCredentials {
                access_key_id,
                secret_access_key,
                session_token: env("AWS_SESSION_TOKEN"),
            })
        }
        (Some(_), None) => {
            return Err(
                "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not: set both".into(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not: set both".into(),
            )
        }
        (None, None) => {}
    }
    let profile = Profile::load(env)?;
    let get = |name: &str| profile.get(name);
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(AwsCredentials {
            access_key_id,
            secret_access_key,
            session_token: get("aws_session_token"),
        }),
        _ if !profile.found => Err(if profile.named {
            format!(
                "no AWS credentials: profile {:?} (AWS_PROFILE) is in neither {} nor {}",
                profile.name,
                profile.credentials_path.display(),
                profile.config_path.display()
            )
        } else {
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, name a \
             profile of ~/.aws/credentials with AWS_PROFILE, or pass options.credentials"
                .to_owned()
        }),
        _ => {
            let indirect = [
                "role_arn",
                "credential_process",
                "sso_session",
                "sso_start_url",
                "web_identity_token_file",
            ]
            .into_iter()
            .find(|o| get(o).is_some());
            Err(match indirect {
                Some(how) => format!(
                    "profile {:?} gets its credentials through {how}, which deadbolt does not \
                     support: export static keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, \
                     AWS_SESSION_TOKEN) or pass options.credentials",
                    profile.name
                ),
                None => format!(
                    "profile {:?} has no aws_access_key_id and aws_secret_access_key",
                    profile.name
                ),
            })
        }
    }
}

/// The region: the URL's, else `AWS_REGION`, `AWS_DEFAULT_REGION`, the profile's `region`.
/// `None` when none of them names one.
pub fn resolve_region(from_url: Option<&str>, env: Env<'_>) -> Result<Option<String>, String> {
    if let Some(region) = from_url {
        return Ok(Some(region.to_owned()));
    }
    if let Some(region) = env("AWS_REGION").or_else(|| env("AWS_DEFAULT_REGION")) {
        return Ok(Some(region));
    }
    Ok(Profile::load(env)?.get("region"))
}

/// One profile of the shared files: its options from the credentials file, then the config
/// file (the credentials file wins, as in the AWS CLI).
struct Profile {
    name: String,
    /// Whether `AWS_PROFILE` named it (rather than falling back to `default`).
    named: bool,
    /// Whether either file has it.
    found: bool,
    credentials_path: PathBuf,
    config_path: PathBuf,
    credentials: ini::Section,
    config: ini::Section,
}

impl Profile {
    fn load(env: Env<'_>) -> Result<Profile, String> {
        let named = env("AWS_PROFILE").or_else(|| env("AWS_DEFAULT_PROFILE"));
        let name = named.clone().unwrap_or_else(|| "default".to_owned());
        let home = env("HOME").or_else(|| env("USERPROFILE"));
        let path = |var: &str, file: &str| -> PathBuf {
            match (env(var), &home) {
                (Some(p), _) => expand_home(&p, home.as_deref()),
                (None, Some(h)) => PathBuf::from(h).join(".aws").join(file),
                (None, None) => PathBuf::from(".aws").join(file),
            }
        };
        let credentials_path = path("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let config_path = path("AWS_CONFIG_FILE", "config");
        let credentials = read(&credentials_path)?.and_then(|mut s| s.remove(&name));
        let mut config_sections = read(&config_path)?.unwrap_or_default();
        let config = config_sections
            .remove(&format!("profile {name}"))
            .or_else(|| (name == "default").then(|| config_sections.remove("default"))?);
        Ok(Profile {
            found: credentials.is_some() || config.is_some(),
            named: named.is_some(),
            name,
            credentials_path,
            config_path,
            credentials: credentials.unwrap_or_default(),
            config: config.unwrap_or_default(),
        })
    }

    fn get(&self, option: &str) -> Option<String> {
        self.credentials
            .get(option)
            .or_else(|| self.config.get(option))
            .filter(|v| !v.is_empty())
            .cloned()
    }
}

fn expand_home(path: &str, home: Option<&str>) -> PathBuf {
    match (path.strip_prefix("~/"), home) {
        (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
        _ => PathBuf::from(path),
    }
}

/// The sections of an INI file, `None` if it does not exist.
fn read(path: &PathBuf) -> Result<Option<std::collections::HashMap<String, ini::Section>>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(Some(ini::parse(&text))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name: &str| map.get(name).cloned()
    }

    /// A directory with the two shared files, removed when dropped.
    struct Files(PathBuf);

    impl Files {
        fn new(credentials: &str, config: &str) -> Files {
            let dir = std::env::temp_dir().join(format!("deadbolt-aws-{}", uuid::Uuid::new_v4()));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("credentials"), credentials).unwrap();
            std::fs::write(dir.join("config"), config).unwrap();
            Files(dir)
        }

        fn vars(&self) -> [(String, String); 2] {
            let p = |f: &str| self.0.join(f).to_string_lossy().into_owned();
            [
                ("AWS_SHARED_CREDENTIALS_FILE".into(), p("credentials")),
                ("AWS_CONFIG_FILE".into(), p("config")),
            ]
        }
    }

    impl Drop for Files {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn with_files<'a>(files: &'a Files, more: &'a [(&'a str, &'a str)]) -> Vec<(String, String)> {
        let mut vars: Vec<(String, String)> = files.vars().to_vec();
        vars.extend(more.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        vars
    }

    fn env_owned(vars: Vec<(String, String)>) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = vars.into_iter().collect();
        move |name: &str| map.get(name).cloned()
    }

    #[test]
    fn options_come_before_the_environment_and_the_environment_before_files() {
        let files = Files::new(
            "[default]\naws_access_key_id = FILE\naws_secret_access_key = f\n",
            "",
        );
        let env = env_owned(with_files(
            &files,
            &[
                ("AWS_ACCESS_KEY_ID", "ENV"),
                ("AWS_SECRET_ACCESS_KEY", "e"),
                ("AWS_SESSION_TOKEN", "t"),
            ],
        ));
        let explicit = AwsCredentials {
            access_key_id: "OPT".into(),
            secret_access_key: "o".into(),
            session_token: None,
        };
        assert_eq!(
            resolve_credentials(Some(&explicit), &env).unwrap(),
            explicit
        );
        let from_env = resolve_credentials(None, &env).unwrap();
        assert_eq!(
            (
                from_env.access_key_id.as_str(),
                from_env.session_token.as_deref()
            ),
            ("ENV", Some("t"))
        );
        let env = env_owned(with_files(&files, &[]));
        assert_eq!(
            resolve_credentials(None, &env).unwrap().access_key_id,
            "FILE"
        );
    }

    #[test]
    fn a_named_profile_is_read_from_the_credentials_file_then_the_config_file() {
        let files = Files::new(
            "[ci]\naws_access_key_id = CI\naws_secret_access_key = c\n",
            "[profile ci]\naws_access_key_id = IGNORED\naws_session_token = tok==\nregion = eu-west-1\n\
             [profile other]\naws_access_key_id = OTHER\naws_secret_access_key = o\n\
             [default]\nregion = us-west-2\n",
        );
        let env = env_owned(with_files(&files, &[("AWS_PROFILE", "ci")]));
        let c = resolve_credentials(None, &env).unwrap();
        assert_eq!(
            (
                c.access_key_id.as_str(),
                c.secret_access_key.as_str(),
                c.session_token.as_deref()
            ),
            ("CI", "c", Some("tok=="))
        );
        assert_eq!(
            resolve_region(None, &env).unwrap().as_deref(),
            Some("eu-west-1")
        );
        let env = env_owned(with_files(&files, &[("AWS_PROFILE", "other")]));
        assert_eq!(
            resolve_credentials(None, &env).unwrap().access_key_id,
            "OTHER"
        );
        let env = env_owned(with_files(&files, &[]));
        assert_eq!(
            resolve_region(None, &env).unwrap().as_deref(),
            Some("us-west-2")
        );
        let env = env_owned(with_files(&files, &[("AWS_REGION", "ap-south-1")]));
        assert_eq!(
            resolve_region(None, &env).unwrap().as_deref(),
            Some("ap-south-1")
        );
        assert_eq!(
            resolve_region(Some("sa-east-1"), &env).unwrap().as_deref(),
            Some("sa-east-1")
        );
    }

    #[test]
    fn what_is_missing_is_named_without_any_key() {
        let files = Files::new(
            "[half]\naws_access_key_id = AKIDHALF\n",
            "[profile role]\nrole_arn = arn:aws:iam::1:role/x\nsource_profile = half\n",
        );
        let err = |vars: &[(&str, &str)]| {
            resolve_credentials(None, &env_owned(with_files(&files, vars))).unwrap_err()
        };
        assert!(err(&[]).contains("no AWS credentials"), "{}", err(&[]));
        let missing = err(&[("AWS_PROFILE", "nope")]);
        assert!(
            missing.contains("\"nope\"") && missing.contains("neither"),
            "{missing}"
        );
        let role = err(&[("AWS_PROFILE", "role")]);
        assert!(
            role.contains("role_arn") && role.contains("not support"),
            "{role}"
        );
        let half = err(&[("AWS_PROFILE", "half")]);
        assert!(
            half.contains("no aws_access_key_id") && !half.contains("AKIDHALF"),
            "{half}"
        );
        let only_id =
            resolve_credentials(None, &env_of(&[("AWS_ACCESS_KEY_ID", "AKIDX")])).unwrap_err();
        assert!(only_id.contains("AWS_SECRET_ACCESS_KEY") && !only_id.contains("AKIDX"));
    }

    #[test]
    fn debug_output_tells_credentials_apart_without_showing_them() {
        let a = AwsCredentials {
            access_key_id: "AKIDONE".into(),
            secret_access_key: "SECRETONE".into(),
            session_token: Some("TOKENONE".into()),
        };
        let b = AwsCredentials {
            secret_access_key: "SECRETTWO".into(),
            ..a.clone()
        };
        let (da, db) = (format!("{a:?}"), format!("{b:?}"));
        assert_ne!(da, db);
        for secret in ["AKIDONE", "SECRET", "TOKENONE"] {
            assert!(!da.contains(secret) && !db.contains(secret), "{da} {db}");
        }
    }
}

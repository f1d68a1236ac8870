//! The request bodies, one function per operation. Every write is one conditional request on
//! one item, so compare-and-act is atomic on the server: the conditions below are the whole
//! lock protocol's server side.
//!
//! Placeholders: `#pk`/`#sk` the key attributes, `#on` ownerName, `#ld` leaseDuration, `#rvn`
//! recordVersionNumber, `#d` data, `#ir` isReleased, `#f` fencingToken; `#ps` permitState and
//! `#pv` permitVersion on semaphore items. An item is *held* when it has an owner and a version
//! and no `isReleased` (what the Java client reads); anything else is free.

use super::config::SortKey;
use super::item::{self, b, n, s};
use super::permit_item;
use serde_json::{json, Map, Value};

/// An item that is absent, released, or not a lock client's.
const FREE: &str =
    "attribute_not_exists(#on) OR attribute_not_exists(#rvn) OR attribute_exists(#ir)";
/// An item that is held (by anyone).
const HELD: &str = "attribute_exists(#on) AND attribute_exists(#rvn) AND attribute_not_exists(#ir)";
/// An item that `:on` holds (an owner is only ever written with a version).
const OWNED: &str = "#on = :on AND attribute_not_exists(#ir)";
/// An item still at the version `:old` a contender watched for a whole lease (the Java
/// client's takeover condition; the owner is not checked, as the lease has run out).
const AT_VERSION: &str = "#rvn = :old";
/// What an item read for a lock needs.
const LOCK_PROJECTION: &str = "#on, #ld, #rvn, #d, #ir, #f";

/// How a lock may be taken.
#[derive(Debug, Clone, Copy)]
pub enum Take<'a> {
    /// Only if it is free.
    Free,
    /// Only if it still has this version (its lease ran out while watched).
    AtVersion(&'a str),
    /// Only if this owner holds it (a handoff).
    From(&'a str),
}

/// The new holder's item: owner, lease, version and payload.
#[derive(Debug, Clone, Copy)]
pub struct Grant<'a> {
    /// `ownerName`.
    pub owner: &'a str,
    /// `leaseDuration`, in ms.
    pub lease_ms: u64,
    /// The new `recordVersionNumber`.
    pub version: &'a str,
    /// `data`; `None` removes it.
    pub data: Option<&'a [u8]>,
    /// The token of an item that has none yet (see [`Requests::take`]).
    pub first_token: u64,
}

/// Builds the requests for one table and key schema.
#[derive(Debug, Clone)]
pub struct Requests {
    table: String,
    partition_key: String,
    sort_key: Option<SortKey>,
}

impl Requests {
    /// Requests on `table`, whose items are keyed by `partition_key` (and `sort_key`).
    pub fn new(table: &str, partition_key: &str, sort_key: Option<SortKey>) -> Requests {
        Requests {
            table: table.to_owned(),
            partition_key: partition_key.to_owned(),
            sort_key,
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The partition key attribute name.
    pub fn partition_key(&self) -> &str {
        &self.partition_key
    }

    /// The primary key of the lock `name`.
    fn key(&self, name: &str) -> Value {
        self.key_of(name)
    }

    /// The primary key of the semaphore `name` (see `permit_item.rs`).
    fn permit_key(&self, name: &str) -> Value {
        self.key_of(&permit_item::partition_value(name))
    }

    fn key_of(&self, partition: &str) -> Value {
        let mut key = Map::new();
        key.insert(self.partition_key.clone(), s(partition));
        if let Some(sort) = &self.sort_key {
            key.insert(sort.name.clone(), s(&sort.value));
        }
        Value::Object(key)
    }

    /// `ExpressionAttributeNames` for the placeholders the expressions use (DynamoDB refuses
    /// unused ones).
    fn names(&self, expressions: &[&str]) -> Value {
        let mut names = Map::new();
        let sort = self.sort_key.as_ref().map(|k| k.name.as_str());
        let all = [
            ("#pk", Some(self.partition_key.as_str())),
            ("#sk", sort),
            ("#on", Some(item::OWNER)),
            ("#ld", Some(item::LEASE)),
            ("#rvn", Some(item::VERSION)),
            ("#d", Some(item::DATA)),
            ("#ir", Some(item::RELEASED)),
            ("#f", Some(item::FENCE)),
            ("#ps", Some(permit_item::STATE)),
            ("#pv", Some(permit_item::VERSION)),
        ];
        for (placeholder, attribute) in all {
            if let Some(attribute) = attribute {
                if expressions.iter().any(|e| uses(e, placeholder)) {
                    names.insert(placeholder.to_owned(), Value::String(attribute.to_owned()));
                }
            }
        }
        Value::Object(names)
    }

    /// A write on the item at `key` that applies only under `condition`: an update by
    /// `update`, or a delete (`None`), with `values` for the expressions' `:` placeholders
    /// (`ExpressionAttributeValues` is left out when there are none: DynamoDB refuses it
    /// empty).
    fn conditional(
        &self,
        key: Value,
        update: Option<&str>,
        condition: &str,
        values: Value,
    ) -> Value {
        let mut body = json!({
            "TableName": self.table,
            "Key": key,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": self.names(&[update.unwrap_or_default(), condition]),
        });
        if let Some(update) = update {
            body["UpdateExpression"] = update.into();
        }
        if values.as_object().is_some_and(|v| !v.is_empty()) {
            body["ExpressionAttributeValues"] = values;
        }
        body
    }

    /// A consistent read of the lock `name`.
    pub fn get(&self, name: &str) -> Value {
        json!({
            "TableName": self.table,
            "Key": self.key(name),
            "ConsistentRead": true,
            "ProjectionExpression": LOCK_PROJECTION,
            "ExpressionAttributeNames": self.names(&[LOCK_PROJECTION]),
        })
    }

    /// Takes the lock `name` for `grant` under `how`, returning the new fencing token
    /// (`ReturnValues`). The token is the item's `fencingToken` plus one, in the same write;
    /// an item that has none (new, deleted on release, or rewritten by a Java client, which
    /// keeps no token) starts from `first_token`.
    pub fn take(&self, name: &str, grant: &Grant<'_>, how: Take<'_>) -> Value {
        let mut update = String::from(
            "SET #on = :on, #ld = :ld, #rvn = :rvn, #f = if_not_exists(#f, :first) + :one",
        );
        let mut values = Map::new();
        values.insert(":on".into(), s(grant.owner));
        values.insert(":ld".into(), s(&grant.lease_ms.to_string()));
        values.insert(":rvn".into(), s(grant.version));
        values.insert(":first".into(), n(grant.first_token));
        values.insert(":one".into(), n(1));
        match grant.data {
            Some(data) => {
                update.push_str(", #d = :d REMOVE #ir");
                values.insert(":d".into(), b(data));
            }
            None => update.push_str(" REMOVE #ir, #d"),
        }
        let condition = match how {
            Take::Free => FREE,
            Take::AtVersion(old) => {
                values.insert(":old".into(), s(old));
                AT_VERSION
            }
            Take::From(owner) => {
                values.insert(":prev".into(), s(owner));
                "#on = :prev AND attribute_not_exists(#ir)"
            }
        };
        let mut body = self.conditional(self.key(name), Some(&update), condition, values.into());
        body["ReturnValues"] = "UPDATED_NEW".into();
        // AWS sends the current item back with a failed condition, saving a read (some
        // servers ignore it; the caller then reads).
        body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD".into();
        body
    }

    /// A heartbeat: `owner` sets a new lease and version, if it holds `name`.
    pub fn renew(&self, name: &str, owner: &str, lease_ms: u64, version: &str) -> Value {
        let values = json!({
            ":on": s(owner), ":ld": s(&lease_ms.to_string()), ":rvn": s(version),
        });
        self.conditional(
            self.key(name),
            Some("SET #ld = :ld, #rvn = :rvn"),
            OWNED,
            values,
        )
    }

    /// `owner` releases `name` if it holds it: marks the item released (keeping its
    /// fencing counter), or deletes it.
    pub fn release(&self, name: &str, owner: &str, delete: bool) -> (&'static str, Value) {
        let mut values = json!({ ":on": s(owner) });
        if delete {
            let body = self.conditional(self.key(name), None, OWNED, values);
            return ("DeleteItem", body);
        }
        values[":ir"] = s(item::RELEASED_VALUE);
        let update = Some("SET #ir = :ir REMOVE #d");
        (
            "UpdateItem",
            self.conditional(self.key(name), update, OWNED, values),
        )
    }

    /// An operator frees `name` whoever holds it: deletes the item, or marks it released
    /// with a new version (so a Java holder's next heartbeat, which is conditioned on the
    /// version, fails at once).
    pub fn force_release(&self, name: &str, version: &str, delete: bool) -> (&'static str, Value) {
        if delete {
            let body = self.conditional(self.key(name), None, HELD, json!({}));
            return ("DeleteItem", body);
        }
        let update = Some("SET #ir = :ir, #rvn = :rvn REMOVE #d");
        let values = json!({ ":ir": s(item::RELEASED_VALUE), ":rvn": s(version) });
        (
            "UpdateItem",
            self.conditional(self.key(name), update, HELD, values),
        )
    }

    /// One page of the held locks whose names start with `prefix`, after `start` (the
    /// previous page's `LastEvaluatedKey`).
    pub fn scan(&self, prefix: &str, start: Option<&Value>) -> Value {
        let mut filter = String::from(HELD);
        let mut values = Map::new();
        // DynamoDB refuses an empty string as an expression value: no prefix, no test.
        if !prefix.is_empty() {
            filter.push_str(" AND begins_with(#pk, :prefix)");
            values.insert(":prefix".into(), s(prefix));
        }
        if let Some(sort) = &self.sort_key {
            filter.push_str(" AND #sk = :sk");
            values.insert(":sk".into(), s(&sort.value));
        }
        let projection = "#pk, #on, #ld, #rvn, #d, #f";
        let mut body = json!({
            "TableName": self.table,
            "ConsistentRead": true,
            "ProjectionExpression": projection,
            "FilterExpression": filter,
            "ExpressionAttributeNames": self.names(&[projection, &filter]),
        });
        if !values.is_empty() {
            body["ExpressionAttributeValues"] = Value::Object(values);
        }
        if let Some(start) = start {
            body["ExclusiveStartKey"] = start.clone();
        }
        body
    }

    /// A consistent read of the semaphore `name`.
    pub fn get_permits(&self, name: &str) -> Value {
        let projection = "#ps, #pv";
        json!({
            "TableName": self.table,
            "Key": self.permit_key(name),
            "ConsistentRead": true,
            "ProjectionExpression": projection,
            "ExpressionAttributeNames": self.names(&[projection]),
        })
    }

    /// Writes the semaphore `name`'s `state` with the new version `version`, if its version is
    /// still `old` (`None`: if it has none, i.e. there is no item yet).
    pub fn put_permits(&self, name: &str, state: &str, version: &str, old: Option<&str>) -> Value {
        let update = "SET #ps = :ps, #pv = :pv";
        let mut values = Map::new();
        values.insert(":ps".into(), s(state));
        values.insert(":pv".into(), s(version));
        let condition = match old {
            Some(old) => {
                values.insert(":old".into(), s(old));
                "#pv = :old"
            }
            None => "attribute_not_exists(#pv)",
        };
        let key = self.permit_key(name);
        let mut body = self.conditional(key, Some(update), condition, values.into());
        body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD".into();
        body
    }

    /// Deletes the semaphore `name`'s item if its version is still `old` (an idle semaphore,
    /// with `deleteOnRelease`).
    pub fn delete_permits(&self, name: &str, old: &str) -> Value {
        let values = json!({ ":old": s(old) });
        let mut body = self.conditional(self.permit_key(name), None, "#pv = :old", values);
        body["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD".into();
        body
    }

    /// The lock table, with on-demand billing.
    pub fn create_table(&self) -> Value {
        let mut schema = vec![json!({ "AttributeName": self.partition_key, "KeyType": "HASH" })];
        let mut attributes =
            vec![json!({ "AttributeName": self.partition_key, "AttributeType": "S" })];
        if let Some(sort) = &self.sort_key {
            schema.push(json!({ "AttributeName": sort.name, "KeyType": "RANGE" }));
            attributes.push(json!({ "AttributeName": sort.name, "AttributeType": "S" }));
        }
        json!({
            "TableName": self.table,
            "BillingMode": "PAY_PER_REQUEST",
            "KeySchema": schema,
            "AttributeDefinitions": attributes,
        })
    }

    /// Asks for the table's status.
    pub fn describe_table(&self) -> Value {
        json!({ "TableName": self.table })
    }
}

/// Whether `expression` uses `placeholder` as a whole token (`#d` is not used by `#data`).
fn uses(expression: &str, placeholder: &str) -> bool {
    expression.match_indices(placeholder).any(|(at, _)| {
        expression[at + placeholder.len()..]
            .chars()
            .next()
            .is_none_or(|c| !(c.is_ascii_alphanumeric() || c == '_'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_placeholders_an_expression_uses_are_named() {
        let r = Requests::new("locks", "key", None);
        let body = r.renew("k", "me", 1000, "v");
        let names = body["ExpressionAttributeNames"].as_object().unwrap();
        let mut used: Vec<&str> = names.keys().map(String::as_str).collect();
        used.sort_unstable();
        assert_eq!(used, ["#ir", "#ld", "#on", "#rvn"]);
        assert!(uses("SET #d = :d", "#d") && !uses("SET #data = :d", "#d"));
    }

    #[test]
    fn a_sort_key_is_part_of_every_key_and_listing() {
        let sort = SortKey {
            name: "sk".into(),
            value: "jobs".into(),
        };
        let r = Requests::new("locks", "pk", Some(sort));
        assert_eq!(
            r.get("a")["Key"],
            json!({"pk": {"S": "a"}, "sk": {"S": "jobs"}})
        );
        let scan = r.scan("", None);
        assert!(scan["FilterExpression"]
            .as_str()
            .unwrap()
            .ends_with("#sk = :sk"));
        assert_eq!(scan["ExpressionAttributeNames"]["#sk"], "sk");
        let table = r.create_table();
        assert_eq!(
            table["KeySchema"][1],
            json!({"AttributeName": "sk", "KeyType": "RANGE"})
        );
    }
}

//! The checks the DynamoDB store makes before any request: names an item can be keyed by,
//! lock names outside the semaphores' key space, and payloads an item can hold.

use super::{permit_item, MAX_DATA_BYTES};
use crate::store::{StoreError, StoreResult};

/// A lock name: a name, and not one in the semaphores' key space (`permit_item.rs`).
pub(super) fn check_key(key: &str) -> StoreResult<()> {
    check_name(key, "lock name")?;
    if key.starts_with(permit_item::PREFIX) {
        return Err(StoreError::invalid(format!(
            "dynamodb: lock names starting with {:?} are reserved for semaphores",
            permit_item::PREFIX
        )));
    }
    Ok(())
}

/// A lock or semaphore name (`what`) DynamoDB can key an item by.
pub(super) fn check_name(name: &str, what: &str) -> StoreResult<()> {
    if name.is_empty() {
        return Err(StoreError::invalid(format!(
            "dynamodb: a {what} must not be empty (DynamoDB key values cannot be)"
        )));
    }
    if name.len() > crate::limits::MAX_KEY_BYTES {
        return Err(StoreError::invalid(format!(
            "dynamodb: {what} is {} bytes, at most {} are supported",
            name.len(),
            crate::limits::MAX_KEY_BYTES
        )));
    }
    Ok(())
}

pub(super) fn check_data(data: Option<&[u8]>) -> StoreResult<()> {
    match data {
        Some(d) if d.len() > MAX_DATA_BYTES => Err(StoreError::invalid(format!(
            "dynamodb: data of {} bytes: a DynamoDB item holds at most 400 KB, so at most \
             {MAX_DATA_BYTES} bytes of data",
            d.len()
        ))),
        _ => Ok(()),
    }
}

//! Azure Blob Storage behind [`ObjectStore`](crate::ObjectStore): not built yet.

use crate::{DynObjectStore, Error, StoreOptions};

/// Opens an Azure Blob Storage client.
pub fn connect(_options: StoreOptions) -> Result<DynObjectStore, Error> {
    Err(Error::Config("Azure Blob Storage (az://) is not built into this ferry yet".into()))
}

//! Google Cloud Storage behind [`ObjectStore`](crate::ObjectStore): not built yet.

use crate::{DynObjectStore, Error, StoreOptions};

/// Opens a Google Cloud Storage client.
pub fn connect(_options: StoreOptions) -> Result<DynObjectStore, Error> {
    Err(Error::Config("Google Cloud Storage (gs://) is not built into this ferry yet".into()))
}

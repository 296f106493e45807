//! What every request handler shares: the pool, the configuration, the sessions.

use std::sync::Arc;

use sqlx::PgPool;

use crate::config::ConsoleConfig;
use crate::schema_gate::SchemaGate;
use crate::sessions::Sessions;

/// One console: cheap to clone, shared by every request.
#[derive(Clone)]
pub(crate) struct Console(Arc<Shared>);

/// What a [`Console`] shares.
pub(crate) struct Shared {
    pub(crate) pool: PgPool,
    pub(crate) config: ConsoleConfig,
    pub(crate) sessions: Sessions,
    pub(crate) schema: SchemaGate,
}

impl Console {
    /// A console over `pool`.
    pub(crate) fn new(pool: PgPool, config: ConsoleConfig) -> Self {
        Self(Arc::new(Shared {
            pool,
            config,
            sessions: Sessions::default(),
            schema: SchemaGate::default(),
        }))
    }
}

impl std::ops::Deref for Console {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

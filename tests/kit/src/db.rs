//! A database of a test's own: created fresh on the test server, dropped at the end of the
//! test, with the one-line reads and writes tests make on it.

use jobs_postgres::testing::TestDatabase;
use sqlx::postgres::PgRow;
use sqlx::{PgPool, Postgres};

use crate::job_row::JobRow;
use crate::wait::wait_until;

/// Most connections of [`Db::pool`].
const POOL_SIZE: u32 = 20;

/// A fresh database of the test's own, dropped with this value; `pool` reaches it.
pub struct Db {
    /// A pool of the test's own on the database.
    pub pool: PgPool,
    database: TestDatabase,
}

impl Db {
    /// A database with the jobs schema.
    pub async fn migrated() -> Self {
        let db = Self::empty().await;
        jobs_postgres::migrate(&db.pool).await.expect("migrate");
        db
    }

    /// A database without the jobs schema.
    pub async fn empty() -> Self {
        let database = TestDatabase::create().await.expect("create test database");
        let pool = database
            .pool(POOL_SIZE)
            .await
            .expect("connect to test database");
        Self { pool, database }
    }

    /// The database's URL, for a connection or a process of its own.
    pub fn url(&self) -> &str {
        self.database.url()
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        self.database.name()
    }

    /// A second pool of at most `connections` to the same database, as another process would
    /// have.
    pub async fn other_pool(&self, connections: u32) -> PgPool {
        self.database.pool(connections).await.expect("connect")
    }

    /// Runs one statement (or several, separated by `;`, when none binds a parameter).
    pub async fn execute(&self, statement: &str) {
        sqlx::raw_sql(statement)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|error| panic!("{statement}: {error}"));
    }

    /// Runs one query returning a number (in its first row).
    pub async fn count(&self, query: &str) -> i64 {
        let numbers: Vec<i64> = self.column(query).await;
        numbers
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{query}: no row"))
    }

    /// Runs one query; returns its rows in order, each as a tuple (or any row type).
    pub async fn rows<T>(&self, query: &str) -> Vec<T>
    where
        T: for<'r> sqlx::FromRow<'r, PgRow> + Send + Unpin,
    {
        sqlx::query_as(query)
            .fetch_all(&self.pool)
            .await
            .unwrap_or_else(|error| panic!("{query}: {error}"))
    }

    /// Runs one query returning one column; returns its values in order.
    pub async fn column<T>(&self, query: &str) -> Vec<T>
    where
        T: for<'r> sqlx::Decode<'r, Postgres> + sqlx::Type<Postgres> + Send + Unpin,
    {
        let rows: Vec<(T,)> = self.rows(query).await;
        rows.into_iter().map(|(value,)| value).collect()
    }

    /// Polls `query` (returning a number) until it returns `expected`; panics after the
    /// default wait naming `what` it waited for.
    pub async fn wait_for_count(&self, what: &str, query: &str, expected: i64) {
        wait_until(what, || async { self.count(query).await == expected }).await;
    }

    /// Polls `query` (returning a number) until it returns at least `least`; panics after the
    /// default wait naming `what` it waited for.
    pub async fn wait_for_count_at_least(&self, what: &str, query: &str, least: i64) {
        wait_until(what, || async { self.count(query).await >= least }).await;
    }

    /// Writes `rows` to the queue; returns their ids in order.
    pub async fn insert_rows(&self, rows: JobRow) -> Vec<i64> {
        rows.insert(&self.pool).await
    }

    /// Writes each set of rows to the queue, in order; returns the ids of each set.
    pub async fn insert_all<const N: usize>(&self, sets: [JobRow; N]) -> [Vec<i64>; N] {
        let mut ids = Vec::with_capacity(N);
        for rows in sets {
            ids.push(rows.insert(&self.pool).await);
        }
        ids.try_into().expect("one set of ids per set of rows")
    }
}

/// Declares `pub struct $name(jobs_testkit::Db)`: a suite's own database type, which derefs to
/// [`Db`] and is made from one, so that the suite gives it methods of its own (its tables, its
/// runner) beside the kit's.
#[macro_export]
macro_rules! suite_db {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        pub struct $name($crate::Db);

        impl ::std::ops::Deref for $name {
            type Target = $crate::Db;

            fn deref(&self) -> &$crate::Db {
                &self.0
            }
        }

        impl ::std::convert::From<$crate::Db> for $name {
            fn from(db: $crate::Db) -> Self {
                Self(db)
            }
        }
    };
}

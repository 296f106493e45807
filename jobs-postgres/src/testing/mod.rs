//! Temporary.
#![allow(missing_docs)]
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, Connection, PgPool};
use std::str::FromStr;
pub struct TestDatabase {
    name: String,
    url: String,
}
impl TestDatabase {
    pub async fn create() -> Result<Self, sqlx::Error> {
        let admin = std::env::var("DATABASE_URL")
            .unwrap_or("postgres://root@127.0.0.1:5432/postgres".into());
        let name = format!("jobs_tmp_{}_{}", std::process::id(), rand::random::<u32>());
        let mut conn = PgConnectOptions::from_str(&admin)?.connect().await?;
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        let url = format!("postgres://root@127.0.0.1:5432/{name}");
        Ok(Self { name, url })
    }
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn url(&self) -> &str {
        &self.url
    }
    pub async fn pool(&self, n: u32) -> Result<PgPool, sqlx::Error> {
        PgPoolOptions::new()
            .max_connections(n)
            .connect(&self.url)
            .await
    }
}

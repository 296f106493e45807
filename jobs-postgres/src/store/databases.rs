//! Creating and dropping whole databases, for the per-test databases of [`crate::testing`]:
//! statements on the server's maintenance database, not on a jobs schema.

use sqlx::PgConnection;

/// Whether the connected role may create databases (superuser or `CREATEDB`) on a server recent
/// enough for `DROP DATABASE .. WITH (FORCE)` (13); no row when the role is not found.
pub const CAN_CREATE_DATABASES: &str = "
SELECT (rolsuper OR rolcreatedb)
   AND current_setting('server_version_num')::int >= 130000
FROM pg_roles WHERE rolname = current_user";

/// `"name"`, quoted as an SQL identifier.
pub(crate) fn quote_identifier(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Whether the connected role may create and force-drop databases: [`CAN_CREATE_DATABASES`].
pub(crate) async fn can_create_databases(
    connection: &mut PgConnection,
) -> Result<bool, sqlx::Error> {
    let usable: Option<bool> = sqlx::query_scalar(CAN_CREATE_DATABASES)
        .fetch_optional(connection)
        .await?;
    Ok(usable == Some(true))
}

/// Creates the empty database `name` (a copy of the server's template).
pub(crate) async fn create_database(
    connection: &mut PgConnection,
    name: &str,
) -> Result<(), sqlx::Error> {
    let statement = format!("CREATE DATABASE {}", quote_identifier(name));
    sqlx::query(&statement).execute(connection).await?;
    Ok(())
}

/// Drops the database `name` if it exists, ending the sessions connected to it.
pub(crate) async fn drop_database(
    connection: &mut PgConnection,
    name: &str,
) -> Result<(), sqlx::Error> {
    let statement = format!(
        "DROP DATABASE IF EXISTS {} WITH (FORCE)",
        quote_identifier(name)
    );
    sqlx::query(&statement).execute(connection).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_quoted_with_inner_quotes_doubled() {
        assert_eq!(quote_identifier("a\"b"), "\"a\"\"b\"");
    }
}

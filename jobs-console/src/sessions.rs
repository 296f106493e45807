//! Signed-in browser sessions, kept in memory: a restart signs everyone out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::RngCore;

/// How long a session lasts after sign-in.
pub(crate) const SESSION_LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// The most sessions kept at once; signing in beyond it forgets the oldest.
const MAX_SESSIONS: usize = 10_000;

/// A signed-in visitor.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    /// Who, as they said at sign-in.
    pub(crate) actor: String,
    /// The token every form of this session carries.
    pub(crate) csrf: String,
    /// When the session ends.
    expires_at: Instant,
}

/// The sessions of one console, by session id.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    by_id: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Opens a session for `actor`; returns its id (the cookie's value).
    pub(crate) fn open(&self, actor: String) -> String {
        let id = random_secret();
        let session = Session {
            actor,
            csrf: random_secret(),
            expires_at: Instant::now() + SESSION_LIFETIME,
        };
        let mut by_id = self
            .by_id
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        let now = Instant::now();
        by_id.retain(|_, session| session.expires_at > now);
        if by_id.len() >= MAX_SESSIONS {
            if let Some(oldest) = by_id
                .iter()
                .min_by_key(|(_, session)| session.expires_at)
                .map(|(id, _)| id.clone())
            {
                by_id.remove(&oldest);
            }
        }
        by_id.insert(id.clone(), session);
        id
    }

    /// The live session `id`, if any.
    pub(crate) fn get(&self, id: &str) -> Option<Session> {
        let by_id = self
            .by_id
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        by_id
            .get(id)
            .filter(|session| session.expires_at > Instant::now())
            .cloned()
    }

    /// Ends session `id`.
    pub(crate) fn close(&self, id: &str) {
        let mut by_id = self
            .by_id
            .lock()
            .unwrap_or_else(|poison| poison.into_inner());
        by_id.remove(id);
    }
}

/// 32 random bytes from the operating system, as hex.
pub(crate) fn random_secret() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_is_found_until_closed() {
        let sessions = Sessions::default();
        let id = sessions.open("ana".to_owned());
        let session = sessions.get(&id).unwrap();
        assert_eq!(session.actor, "ana");
        assert_eq!(session.csrf.len(), 64);
        assert!(sessions.get("unknown").is_none());
        sessions.close(&id);
        assert!(sessions.get(&id).is_none());
    }
}

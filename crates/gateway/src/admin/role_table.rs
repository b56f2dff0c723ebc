//! The role table as data: which role may call which route of the admin API (`/admin/*`) and of
//! the console's API (`/ui/api/*`, whose `keys`, `teams`, `users` and `audit` are the admin
//! API's own rows under another prefix). Both surfaces ask here, so a cell cannot differ between
//! them; a route the table does not name is the admin role's alone. The records a call touches
//! are checked again (`access.rs`: whose key, which team's usage).

/// Who, short of the admin role (which may do everything), may call a route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum May {
    /// Every role.
    Everyone,
    /// Every role but viewer.
    Writers,
    /// The viewer role (it reads what only admins read otherwise: the overview, backends).
    Viewers,
    /// An administrator of the team the route names (`{team}`).
    TeamAdmins,
    /// An administrator of any team.
    AnyTeamAdmin,
    /// The user the route names (`{user}`), or an administrator of any team.
    SelfOrTeamAdmin,
}

/// Method, route (a `{…}` segment matches any one segment) and who may call it.
pub const ROLE_TABLE: &[(&str, &str, May)] = &[
    ("GET", "/admin/openapi.json", May::Everyone),
    ("GET", "/admin/keys", May::Everyone),
    ("GET", "/admin/keys/{key}", May::Everyone),
    ("POST", "/admin/keys", May::Writers),
    ("PATCH", "/admin/keys/{key}", May::Writers),
    ("DELETE", "/admin/keys/{key}", May::Writers),
    ("GET", "/admin/usage", May::Everyone),
    ("GET", "/admin/teams", May::Everyone),
    ("GET", "/admin/teams/{team}", May::Everyone),
    ("GET", "/admin/teams/{team}/members", May::Everyone),
    ("POST", "/admin/teams/{team}/members", May::TeamAdmins),
    ("DELETE", "/admin/teams/{team}/members/{user}", May::TeamAdmins),
    ("GET", "/admin/users", May::AnyTeamAdmin),
    ("GET", "/admin/users/{user}", May::SelfOrTeamAdmin),
    ("GET", "/admin/policies", May::Viewers),
    ("GET", "/admin/policies/{name}", May::Viewers),
    ("GET", "/admin/experiments", May::Everyone),
    ("GET", "/admin/experiments/{name}", May::Everyone),
    ("GET", "/admin/experiments/{name}/pairs", May::Everyone),
    ("POST", "/admin/experiments", May::AnyTeamAdmin),
    ("PUT", "/admin/experiments/{name}", May::AnyTeamAdmin),
    ("DELETE", "/admin/experiments/{name}", May::AnyTeamAdmin),
    ("GET", "/ui/api/me", May::Everyone),
    ("GET", "/ui/api/models", May::Everyone),
    ("GET", "/ui/api/usage", May::Everyone),
    ("GET", "/ui/api/usage.csv", May::Everyone),
    ("GET", "/ui/api/requests", May::Everyone),
    ("GET", "/ui/api/overview", May::Viewers),
    ("GET", "/ui/api/backends", May::Viewers),
    ("GET", "/ui/api/mcp", May::Viewers),
    ("GET", "/ui/api/cache", May::Viewers),
    ("POST", "/ui/api/chat/completions", May::Writers),
];

/// The row for a call, with the segments its `{team}` and `{user}` matched ("" where none).
pub fn row<'a>(method: &str, path: &'a str) -> Option<(May, Named<'a>)> {
    let path = path.trim_end_matches('/');
    ROLE_TABLE.iter().filter(|(m, _, _)| *m == method).find_map(|(_, route, may)| {
        let mut named = Named::default();
        let (mut want, mut have) = (route.split('/'), path.split('/'));
        loop {
            match (want.next(), have.next()) {
                (None, None) => return Some((*may, named)),
                (Some("{team}"), Some(s)) if !s.is_empty() => named.team = s,
                (Some("{user}"), Some(s)) if !s.is_empty() => named.user = s,
                (Some(w), Some(s)) if w == s || (w.starts_with('{') && !s.is_empty()) => {}
                _ => return None,
            }
        }
    })
}

/// What a route's `{team}` and `{user}` segments named.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Named<'a> {
    pub team: &'a str,
    pub user: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_find_their_rows_and_name_their_segments() {
        assert_eq!(row("GET", "/admin/keys/k_1").map(|r| r.0), Some(May::Everyone));
        assert_eq!(row("PATCH", "/admin/keys/k_1/").map(|r| r.0), Some(May::Writers));
        let (may, named) = row("DELETE", "/admin/teams/t_1/members/u_2").unwrap();
        assert_eq!((may, named), (May::TeamAdmins, Named { team: "t_1", user: "u_2" }));
        assert_eq!(row("GET", "/ui/api/usage.csv").map(|r| r.0), Some(May::Everyone));
        // Unnamed routes, other methods, empty or extra segments: the admin role's alone.
        assert!(row("GET", "/admin/audit").is_none());
        assert!(row("PUT", "/admin/keys/k_1").is_none());
        assert!(row("GET", "/admin/keys//").is_some_and(|r| r.0 == May::Everyone));
        assert!(row("GET", "/admin/teams//members").is_none());
        assert!(row("GET", "/admin/keys/k_1/extra").is_none());
    }
}

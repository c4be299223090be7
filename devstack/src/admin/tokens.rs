//! `POST /v1/tokens`: mint a join token. The stack writes it to
//! `<data dir>/join-tokens/<token id>` (mode 0600) and answers the path:
//! the token itself never crosses the endpoint, never reaches a log.
//! `GET /v1/tokens`: every token of every pool (its id, uses, expiry and
//! file, never the token), oldest first.

use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;

use crate::clock::now_ms;
use sha2::{Digest as _, Sha256};

use super::api::{self, TokenRequest, TokenSummary, TokenView};
use super::{Answer, ApiError};
use proto::refusal::Code;

/// The directory of minted token files, under the data directory.
pub const TOKENS_DIR: &str = "join-tokens";

pub(super) fn routes() -> Router<super::State> {
    Router::new().route(&format!("{}/tokens", api::PREFIX), post(mint).get(list))
}

async fn mint(State(s): State<super::State>, Json(request): Json<TokenRequest>) -> Answer<TokenView> {
    if request.uses == 0 || request.ttl_ms == 0 {
        return Err(ApiError::bad_request("a join token needs at least one use and a positive lifetime"));
    }
    let name = request.pool.as_deref().unwrap_or(&s.options.default_pool);
    let pool = s
        .stack
        .view(|v| v.pools().into_iter().find(|p| p.id == name || p.name == name))?
        .ok_or_else(|| ApiError::not_found(Code::PoolUnknown, format!("no pool is named {name:?}")))?;
    let token = s.stack.mint_join_token(&pool.id, request.uses, Duration::from_millis(request.ttl_ms)).await?;
    let sha256 = hex::encode(Sha256::digest(token.as_bytes()));
    let row =
        s.stack.view(|v| v.join_tokens(&pool.id).into_iter().find(|t| t.token_sha256 == sha256))?.ok_or_else(|| {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, "the minted token is not stored")
        })?;
    let dir = s.options.data_dir.join(TOKENS_DIR);
    let file = dir.join(&row.id);
    let written = std::fs::create_dir_all(&dir)
        .and_then(|()| super::discovery::write_private(&file, format!("{token}\n").as_bytes()));
    drop(token);
    written.map_err(|e| {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, Code::Internal, format!("writing {}: {e}", file.display()))
    })?;
    Ok(Json(TokenView {
        token_id: row.id,
        pool_id: pool.id,
        pool: pool.name,
        uses: row.max_uses,
        expires_at_ms: row.expires_at_ms,
        file: file.display().to_string(),
    }))
}

async fn list(State(s): State<super::State>) -> Answer<Vec<TokenSummary>> {
    let now = now_ms();
    let dir = s.options.data_dir.join(TOKENS_DIR);
    let mut tokens: Vec<TokenSummary> = s.stack.view(|v| {
        v.pools()
            .into_iter()
            .flat_map(|pool| {
                v.join_tokens(&pool.id).into_iter().map(move |t| {
                    let state = if t.uses >= t.max_uses {
                        "exhausted"
                    } else if t.expires_at_ms <= now {
                        "expired"
                    } else {
                        "valid"
                    };
                    (pool.name.clone(), t, state)
                })
            })
            .map(|(pool, t, state)| TokenSummary {
                file: Some(dir.join(&t.id)).filter(|f| f.is_file()).map(|f| f.display().to_string()),
                token_id: t.id,
                pool_id: t.pool_id,
                pool,
                state: state.to_string(),
                used: t.uses,
                uses: t.max_uses,
                expires_at_ms: t.expires_at_ms,
                created_at_ms: t.created_at_ms,
            })
            .collect()
    })?;
    tokens.sort_by(|a, b| (a.created_at_ms, &a.token_id).cmp(&(b.created_at_ms, &b.token_id)));
    Ok(Json(tokens))
}

//! `kbind login`: a bearer token checked against `/api/v1/whoami`, or OIDC in a browser when the
//! gateway offers it and no token was given; the credential is cached per gateway.

pub mod oidc;

use kbind_api::service::ProviderInfo;

use crate::Context;
use crate::args::LoginArgs;
use crate::creds::{self, Credential};
use crate::error::{CliError, Result};
use crate::gateway::Gateway;
use crate::output::emit;

/// Signs in to the gateway and caches the credential.
pub async fn login(args: &LoginArgs, ctx: &mut Context) -> Result<()> {
    let base = creds::normalize(&args.gateway_url);
    let url = reqwest::Url::parse(&base).map_err(|_| {
        CliError::Usage(format!(
            "{base:?} is not a URL; pass the gateway's address, e.g. https://kbind.example.com"
        ))
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(CliError::Usage(format!(
            "{base} is not a gateway URL: only http(s) URLs are gateways, e.g. https://kbind.example.com"
        )));
    }
    let anonymous = Gateway::new(&base, None)?;
    let info = anonymous.probe().await?;
    let (token, expires_at, oidc_issuer) = match &args.token {
        Some(token) => (token.clone(), None, None),
        None => token_without_flag(&info, &base, args, ctx).await?,
    };
    let gateway = Gateway::new(&base, Some(token.clone()))?;
    let me = gateway.whoami().await.map_err(|e| match e {
        CliError::Unauthorized(_) => CliError::Unauthorized(format!(
            "{base} did not accept the token; check it (or ask the provider for one) and run `kbind login {base} --token <token>` again"
        )),
        other => other,
    })?;
    let cred = Credential {
        gateway: base.clone(),
        token,
        subject: me.subject.clone(),
        expires_at,
        oidc_issuer,
    };
    creds::save(&ctx.config_dir, &cred)?;
    let who = me.name.as_deref().unwrap_or(&me.subject);
    emit(
        &mut ctx.stdout,
        &format!("Logged in to {} ({base}) as {who}.\n", info.name),
    )
}

/// Without `--token`: OIDC in a browser when offered, else a clear request for a token. The
/// issuer must be `--oidc-issuer` when given, else the one of the last sign-in to this gateway.
async fn token_without_flag(
    info: &ProviderInfo,
    base: &str,
    args: &LoginArgs,
    ctx: &mut Context,
) -> Result<(String, Option<String>, Option<String>)> {
    let Some(method) = info.auth_methods.iter().find(|m| m.kind == "oidc") else {
        return Err(CliError::Usage(format!(
            "{base} signs in with a bearer token: run `kbind login {base} --token <token>` (or set KBIND_TOKEN)"
        )));
    };
    let url = reqwest::Url::parse(base).map_err(|e| CliError::Usage(format!("{base:?} is not a URL: {e}")))?;
    let opts = oidc::OidcLoginOptions {
        no_browser: args.no_browser,
        ca_file: args.oidc_ca_file.clone(),
        pinned_issuer: args
            .oidc_issuer
            .clone()
            .or_else(|| creds::previous_issuer(&ctx.config_dir, base)),
        ..Default::default()
    };
    let issued = oidc::login(&url, method, &opts, &mut *ctx.stderr)
        .await
        .map_err(|e| CliError::Failed(e.to_string()))?;
    Ok((
        issued.id_token,
        issued.expires_at.map(|t| t.to_string()),
        Some(issued.issuer),
    ))
}

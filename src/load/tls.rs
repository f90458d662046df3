//! TLS for every connection witness makes to a server (the load's, the probes', the floor's, the
//! proxy's upstream): rustls, no OpenSSL. Whom to trust is decided once per run, at the edge
//! (`--cacert`, `--insecure`), and every connector reads it here. A certificate witness does not
//! trust is said in words (unknown issuer, expired, wrong name) with both ways out; a connection
//! whose handshake failed is a [`TlsFailure`], so its outcome is the `tls` error kind, never a
//! timeout or a plain connect failure.

use std::path::Path;
use std::sync::{Arc, RwLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore};

/// Whom witness trusts for this run, and the two client configurations made from it (HTTP/1.1
/// only, and HTTP/2 offered first by ALPN).
pub struct Tls {
    h1: Arc<ClientConfig>,
    h2: Arc<ClientConfig>,
    /// `--insecure`: certificates are not verified at all.
    pub insecure: bool,
    /// `--cacert`: how many certificates the file added.
    pub cacert: Option<usize>,
}

static TLS: RwLock<Option<Arc<Tls>>> = RwLock::new(None);

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn configs(verifier: Verify) -> (Arc<ClientConfig>, Arc<ClientConfig>) {
    let make = |alpn: &[&[u8]]| {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions");
        let mut c = match &verifier {
            Verify::Roots(roots) => builder
                .with_root_certificates(roots.clone())
                .with_no_client_auth(),
            Verify::Named(named) => builder
                .dangerous()
                .with_custom_certificate_verifier(named.clone())
                .with_no_client_auth(),
            Verify::Nothing => builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(NoVerify(provider())))
                .with_no_client_auth(),
        };
        c.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(c)
    };
    (make(&[b"http/1.1"]), make(&[b"h2", b"http/1.1"]))
}

enum Verify {
    Roots(Arc<RootCertStore>),
    /// `--cacert`: the system's store and the file's certificates as trust anchors, and each of
    /// the file's certificates also trusted as itself.
    Named(Arc<Named>),
    Nothing,
}

/// The system's trust store (what `/etc/ssl/certs` holds, or `SSL_CERT_FILE`/`SSL_CERT_DIR`).
fn system_roots() -> RootCertStore {
    let mut roots = RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let _ = roots.add_parsable_certificates(found.certs);
    roots
}

/// Reads `--cacert FILE`: every certificate in the PEM file; a file that holds none, or cannot be
/// read, is bad usage naming the flag.
pub fn read_cacert(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use rustls::pki_types::pem::PemObject;
    let shown = path.display();
    let bytes = std::fs::read(path)
        .map_err(|e| format!("--cacert {shown}: could not read the file: {e}"))?;
    let certs: Result<Vec<_>, _> = CertificateDer::pem_slice_iter(&bytes).collect();
    let certs = certs.map_err(|e| {
        format!("--cacert {shown} is not a PEM certificate file ({e:?}): give the CA's or the self-signed certificate's PEM (-----BEGIN CERTIFICATE-----)")
    })?;
    if certs.is_empty() {
        return Err(format!(
            "--cacert {shown} holds no PEM certificate (no -----BEGIN CERTIFICATE----- block): give the CA's or the self-signed certificate's PEM"
        ));
    }
    Ok(certs)
}

/// Decides whom the run trusts: the system's store, plus `cacert`'s certificates; or nobody
/// checked at all with `insecure`. Errors name the flag (bad usage).
pub fn install(cacert: Option<&Path>, insecure: bool) -> Result<Arc<Tls>, String> {
    let mut added = None;
    let verify = if insecure {
        // Read all the same, so a wrong path is said even beside --insecure.
        if let Some(p) = cacert {
            read_cacert(p)?;
        }
        Verify::Nothing
    } else {
        let mut roots = system_roots();
        match cacert {
            Some(p) => {
                let certs = read_cacert(p)?;
                added = Some(certs.len());
                for c in &certs {
                    roots.add(c.clone()).map_err(|e| {
                        format!(
                            "--cacert {}: a certificate in it cannot be a trust anchor: {e}",
                            p.display()
                        )
                    })?;
                }
                let webpki = rustls::client::WebPkiServerVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider(),
                )
                .build()
                .map_err(|e| format!("--cacert {}: {e}", p.display()))?;
                Verify::Named(Arc::new(Named {
                    webpki,
                    named: certs,
                    file: p.display().to_string(),
                }))
            }
            None => Verify::Roots(Arc::new(roots)),
        }
    };
    let (h1, h2) = configs(verify);
    let tls = Arc::new(Tls {
        h1,
        h2,
        insecure,
        cacert: added,
    });
    *TLS.write().unwrap_or_else(|e| e.into_inner()) = Some(tls.clone());
    Ok(tls)
}

/// The run's TLS settings (the system's trust store when nothing was installed).
pub fn current() -> Arc<Tls> {
    if let Some(t) = TLS.read().unwrap_or_else(|e| e.into_inner()).as_ref() {
        return t.clone();
    }
    let (h1, h2) = configs(Verify::Roots(Arc::new(system_roots())));
    let tls = Arc::new(Tls {
        h1,
        h2,
        insecure: false,
        cacert: None,
    });
    TLS.write()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert(tls)
        .clone()
}

/// The run's trust from its flags, at the edge: bad usage (exit 2) names the flag. `--insecure` is
/// said by the command (and journalled by [`journal_note`]): this module prints nothing.
pub fn from_flags(cacert: Option<&Path>, insecure: bool) -> anyhow::Result<Arc<Tls>> {
    install(cacert, insecure).map_err(crate::error::usage)
}

/// Journals `--insecure` as a note, so every report says it.
pub fn journal_note(journal: &crate::journal::Journal) {
    let insecure = TLS
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|t| t.insecure);
    if insecure {
        journal.emit(crate::journal::Event::Note {
            level: "warn".into(),
            text: INSECURE_NOTE.into(),
        });
    }
}

/// A URL's port, or its scheme's (443 for https://, 80 otherwise).
pub fn port(uri: &hyper::Uri) -> u16 {
    uri.port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        })
}

/// The last certificate witness refused in a handshake (what a failed probe met), for the refusal's
/// words.
static UNTRUSTED: std::sync::Mutex<Option<TlsFailure>> = std::sync::Mutex::new(None);

/// The last certificate witness refused, if any.
pub fn last_untrusted() -> Option<TlsFailure> {
    UNTRUSTED.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// The one line said on the terminal (and journalled as a note) when `--insecure` is given.
pub const INSECURE_NOTE: &str = "--insecure: the server's TLS certificate is not verified (anyone on the path could answer in its place); the numbers are still the server's";

impl Tls {
    /// The client configuration for a connection: HTTP/2 offered by ALPN (`h2`), or HTTP/1.1 only.
    pub fn config(&self, h2: bool) -> Arc<ClientConfig> {
        if h2 {
            self.h2.clone()
        } else {
            self.h1.clone()
        }
    }
}

/// A TLS stream to the server over TCP.
pub type Stream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

/// The TLS handshake on a connected TCP stream, for `host` (the URL's: a name or an address).
pub async fn handshake(
    tcp: tokio::net::TcpStream,
    host: &str,
    h2: bool,
) -> Result<Stream, TlsFailure> {
    let bare = host.trim_matches(['[', ']']);
    let name = ServerName::try_from(bare.to_string()).map_err(|e| TlsFailure {
        host: host.to_string(),
        why: format!("{host:?} is not a name TLS can check a certificate against: {e}"),
        certificate: false,
        plain_http: false,
    })?;
    let peer = tcp.peer_addr().ok();
    let connector = tokio_rustls::TlsConnector::from(current().config(h2));
    match connector.connect(name, tcp).await {
        Ok(s) => Ok(s),
        Err(e) => {
            let mut f = TlsFailure::from_io(host, &e);
            if f.certificate {
                *UNTRUSTED.lock().unwrap_or_else(|e| e.into_inner()) = Some(f.clone());
            }
            // Not a TLS record at all: most often an https:// URL for a plain-HTTP server, which
            // answers the ClientHello with `HTTP/1.1 400`. Asked once more in plain HTTP to be sure.
            let corrupt = matches!(rustls_error(&e), Some(rustls::Error::InvalidMessage(_)));
            if let Some(addr) = peer.filter(|_| corrupt) {
                if speaks_plain_http(addr).await {
                    f.plain_http = true;
                    f.why = format!(
                        "no TLS at {}: it speaks plain HTTP: use http:// for it, not https://",
                        authority(host, addr.port())
                    );
                }
            }
            Err(f)
        }
    }
}

/// `host:port` as a URL writes it (an IPv6 address in brackets).
pub fn authority(host: &str, port: u16) -> String {
    let bare = host.trim_matches(['[', ']']);
    if bare.contains(':') {
        format!("[{bare}]:{port}")
    } else {
        format!("{bare}:{port}")
    }
}

/// Whether `addr` answers a plain HTTP request with an HTTP status line (within a second).
async fn speaks_plain_http(addr: std::net::SocketAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let ask = async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        s.write_all(b"HEAD / HTTP/1.0\r\n\r\n").await.ok()?;
        let mut head = [0u8; 5];
        s.read_exact(&mut head).await.ok()?;
        Some(&head == b"HTTP/")
    };
    tokio::time::timeout(std::time::Duration::from_secs(1), ask)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}

/// Whether the connection negotiated HTTP/2 by ALPN.
pub fn negotiated_h2(s: &Stream) -> bool {
    s.get_ref().1.alpn_protocol() == Some(b"h2")
}

/// A connection to the server: plain TCP, or TLS over it.
pub enum Io {
    Plain(hyper_util::rt::TokioIo<tokio::net::TcpStream>),
    Tls(Box<hyper_util::rt::TokioIo<Stream>>),
}

impl Io {
    /// The TCP stream underneath (to close it gracefully, or read what is left).
    pub fn tcp(&mut self) -> &mut tokio::net::TcpStream {
        match self {
            Io::Plain(io) => io.inner_mut(),
            Io::Tls(io) => io.inner_mut().get_mut().0,
        }
    }

    /// Whether HTTP/2 was agreed by ALPN.
    pub fn h2(&self) -> bool {
        match self {
            Io::Plain(_) => false,
            Io::Tls(io) => negotiated_h2(io.inner()),
        }
    }
}

macro_rules! both {
    ($self:ident, $io:ident => $e:expr) => {
        match $self.get_mut() {
            Io::Plain($io) => {
                let $io = std::pin::Pin::new($io);
                $e
            }
            Io::Tls($io) => {
                let $io = std::pin::Pin::new(&mut **$io);
                $e
            }
        }
    };
}

impl hyper::rt::Read for Io {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        both!(self, io => io.poll_read(cx, buf))
    }
}

impl hyper::rt::Write for Io {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        both!(self, io => io.poll_write(cx, buf))
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        both!(self, io => io.poll_flush(cx))
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        both!(self, io => io.poll_shutdown(cx))
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            Io::Plain(io) => hyper::rt::Write::is_write_vectored(io),
            Io::Tls(io) => hyper::rt::Write::is_write_vectored(&**io),
        }
    }
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        both!(self, io => io.poll_write_vectored(cx, bufs))
    }
}

impl hyper_util::client::legacy::connect::Connection for Io {
    fn connected(&self) -> hyper_util::client::legacy::connect::Connected {
        match self {
            Io::Plain(io) => io.connected(),
            Io::Tls(io) => {
                let c = io.inner().get_ref().0.connected();
                if negotiated_h2(io.inner()) {
                    c.negotiated_h2()
                } else {
                    c
                }
            }
        }
    }
}

/// A TLS handshake that failed: the server's certificate was not trusted (`certificate`), or the
/// handshake itself failed (no common protocol, an alert, the server closed).
#[derive(Debug, Clone)]
pub struct TlsFailure {
    pub host: String,
    pub why: String,
    pub certificate: bool,
    /// The server answered in plain HTTP: the URL should say http://.
    pub plain_http: bool,
}

impl std::fmt::Display for TlsFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.refusal())
    }
}

impl std::error::Error for TlsFailure {}

/// The ways out of a certificate witness does not trust, said after every such reason.
pub const WAYS_OUT: &str = "trust it with --cacert FILE (the PEM of the CA that signed it, or of the self-signed certificate itself), or skip verification with --insecure";

impl TlsFailure {
    fn from_io(host: &str, e: &std::io::Error) -> Self {
        match rustls_error(e) {
            Some(r) => {
                let (why, certificate) = words(r, host);
                Self {
                    host: host.into(),
                    why,
                    certificate,
                    plain_http: false,
                }
            }
            None => Self {
                host: host.into(),
                why: format!("the TLS handshake with {host} failed: {e}"),
                certificate: false,
                plain_http: false,
            },
        }
    }

    /// The refusal's words: the reason, then the ways out when it is the certificate.
    pub fn refusal(&self) -> String {
        if self.certificate {
            format!("{}; {WAYS_OUT}", self.why)
        } else {
            self.why.clone()
        }
    }
}

/// The rustls error inside an I/O error (tokio-rustls wraps it), if any.
pub fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(r) = c.downcast_ref::<rustls::Error>() {
            return Some(r);
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(r) = rustls_error(inner) {
                    return Some(r);
                }
            }
        }
        cur = c.source();
    }
    None
}

/// Whether TLS failed somewhere in this error's chain: a handshake, or the encrypted stream after it.
pub fn is_tls(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if c.is::<TlsFailure>() {
            return true;
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if is_tls(inner) {
                    return true;
                }
            }
        }
        cur = c.source();
    }
    rustls_error(e).is_some()
}

/// The certificate failure inside this error, if the handshake failed on the certificate.
pub fn untrusted(e: &(dyn std::error::Error + 'static)) -> Option<TlsFailure> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(t) = c.downcast_ref::<TlsFailure>() {
            return t.certificate.then(|| t.clone());
        }
        if let Some(io) = c.downcast_ref::<std::io::Error>() {
            if let Some(inner) = io.get_ref() {
                if let Some(t) = untrusted(inner) {
                    return Some(t);
                }
            }
        }
        cur = c.source();
    }
    None
}

fn when(t: UnixTime) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(t.as_secs());
    humantime::format_rfc3339_seconds(at).to_string()
}

/// A rustls error in words, and whether it is about the certificate (witness does not trust it).
pub fn words(e: &rustls::Error, host: &str) -> (String, bool) {
    let cert = |what: String| {
        (
            format!("the TLS certificate of {host} is not trusted: {what}"),
            true,
        )
    };
    match e {
        rustls::Error::InvalidCertificate(c) => match c {
            CertificateError::UnknownIssuer => cert(
                "unknown issuer: it was signed by an authority witness does not trust (a self-signed or a development CA's certificate is not in the system's trust store)".into(),
            ),
            CertificateError::ExpiredContext { time, not_after } => cert(format!(
                "it has expired: it was valid until {}, and it is now {}",
                when(*not_after),
                when(*time)
            )),
            CertificateError::Expired => cert("it has expired (or its validity dates are invalid)".into()),
            CertificateError::NotValidYetContext { time, not_before } => cert(format!(
                "it is not valid yet: it is valid from {}, and it is now {}",
                when(*not_before),
                when(*time)
            )),
            CertificateError::NotValidYet => cert("it is not valid yet".into()),
            CertificateError::NotValidForNameContext { expected, presented } => {
                let names: Vec<String> = presented
                    .iter()
                    .map(|p| {
                        p.trim_start_matches("DnsName(")
                            .trim_start_matches("IpAddress(")
                            .trim_end_matches(')')
                            .trim_matches('"')
                            .to_string()
                    })
                    .collect();
                let asked = expected.to_str();
                cert(format!(
                    "wrong name: it is for {} (the names it holds), not for {asked} (the name asked); ask for one of its names in the URL, or give the server a certificate for {asked}",
                    if names.is_empty() { "no name at all".to_string() } else { names.join(", ") }
                ))
            }
            CertificateError::NotValidForName => cert(format!("wrong name: it is not for {host} (the name asked)")),
            CertificateError::Other(o) if o.0.downcast_ref::<NotNamed>().is_some() => cert(o.0.to_string()),
            CertificateError::Other(o) if format!("{o:?}").contains("CaUsedAsEndEntity") => cert(
                "it is a CA certificate (basicConstraints CA:TRUE, as `openssl req -x509` makes a self-signed one) served as the server's own, and no authority witness trusts signed it".into(),
            ),
            CertificateError::BadSignature
            | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
            | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => cert(
                "unknown issuer: no certificate witness trusts signed it (one with its issuer's name is trusted, but its key did not sign this one)".into(),
            ),
            other => cert(format!("{other:?}")),
        },
        rustls::Error::AlertReceived(a) => (format!("the TLS handshake with {host} failed: the server sent the alert {a:?}"), false),
        rustls::Error::NoApplicationProtocol => (
            format!("the TLS handshake with {host} failed: the server speaks none of the protocols offered by ALPN"),
            false,
        ),
        other => (format!("TLS with {host} failed: {other}"), false),
    }
}

/// `--cacert FILE`'s trust: a server that presents, byte for byte, a certificate the file holds is
/// trusted as that certificate — what curl, Go, Python's ssl and k6 do with a self-signed one, which
/// OpenSSL 3 makes with `CA:TRUE` and webpki would otherwise refuse as "a CA certificate used as
/// the server's own" — with its validity period and its names still checked. Any other
/// certificate goes through webpki's chain building to the system's store and the file's
/// certificates, as without this.
#[derive(Debug)]
struct Named {
    webpki: Arc<rustls::client::WebPkiServerVerifier>,
    named: Vec<CertificateDer<'static>>,
    /// The `--cacert` file, as given: named when the server's certificate is neither in it nor
    /// signed by one trusted.
    file: String,
}

/// The server's certificate is not one `--cacert` names, and no trusted certificate signed it.
#[derive(Debug)]
struct NotNamed(String);

impl std::fmt::Display for NotNamed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "it is not the certificate in --cacert {}, and no certificate there or in the system's trust store signed it",
            self.0
        )
    }
}

impl std::error::Error for NotNamed {}

impl ServerCertVerifier for Named {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.named.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return self
                .webpki
                .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
                .map_err(|e| match e {
                    // No chain to a trusted certificate: said with the file the user gave.
                    rustls::Error::InvalidCertificate(
                        CertificateError::UnknownIssuer | CertificateError::BadSignature,
                    ) => not_named(&self.file),
                    rustls::Error::InvalidCertificate(CertificateError::Other(o))
                        if format!("{o:?}").contains("CaUsedAsEndEntity") =>
                    {
                        not_named(&self.file)
                    }
                    e => e,
                });
        }
        check_validity(end_entity, now)?;
        let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
        rustls::client::verify_server_name(&parsed, server_name)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

fn not_named(file: &str) -> rustls::Error {
    CertificateError::Other(rustls::OtherError(Arc::new(NotNamed(file.to_string())))).into()
}

/// The certificate's validity period (notBefore, notAfter) against `now`, with the errors webpki
/// gives for it. webpki checks it only while building a chain, and a certificate trusted as itself
/// has none, so its two dates are read here: certificate → tbsCertificate → [version], serial,
/// signature, issuer, validity (RFC 5280 4.1).
fn check_validity(cert: &CertificateDer<'_>, now: UnixTime) -> Result<(), rustls::Error> {
    let bad = || rustls::Error::InvalidCertificate(CertificateError::BadEncoding);
    let (not_before, not_after) = validity(cert.as_ref()).ok_or_else(bad)?;
    let (time, not_before, not_after) = (
        now,
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_before)),
        UnixTime::since_unix_epoch(std::time::Duration::from_secs(not_after)),
    );
    if time.as_secs() < not_before.as_secs() {
        return Err(CertificateError::NotValidYetContext { time, not_before }.into());
    }
    if time.as_secs() > not_after.as_secs() {
        return Err(CertificateError::ExpiredContext { time, not_after }.into());
    }
    Ok(())
}

/// A certificate's notBefore and notAfter, in seconds since the epoch (DER: see [`check_validity`]).
fn validity(der: &[u8]) -> Option<(u64, u64)> {
    /// One DER element: its tag, its contents, and what follows it.
    fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
        let (&tag, rest) = input.split_first()?;
        let (&first, rest) = rest.split_first()?;
        let (len, rest) = if first < 0x80 {
            (first as usize, rest)
        } else {
            let n = (first & 0x7f) as usize;
            if n == 0 || n > 4 || rest.len() < n {
                return None;
            }
            let len = rest[..n].iter().fold(0usize, |a, &b| (a << 8) | b as usize);
            (len, &rest[n..])
        };
        (rest.len() >= len).then(|| (tag, &rest[..len], &rest[len..]))
    }
    const SEQUENCE: u8 = 0x30;
    let (tag, cert, _) = tlv(der)?;
    let (tbs_tag, tbs, _) = tlv(cert)?;
    if tag != SEQUENCE || tbs_tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] version (absent for v1), serialNumber, signature, issuer: skipped.
    if rest.first() == Some(&0xa0) {
        rest = tlv(rest)?.2;
    }
    for _ in 0..3 {
        rest = tlv(rest)?.2;
    }
    let (tag, validity, _) = tlv(rest)?;
    if tag != SEQUENCE {
        return None;
    }
    let (t1, before, rest) = tlv(validity)?;
    let (t2, after, _) = tlv(rest)?;
    Some((asn1_time(t1, before)?, asn1_time(t2, after)?))
}

/// UTCTime (`YYMMDDHHMMSSZ`, 1950–2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`) in seconds since
/// the epoch (a time before it is 0); None for anything else (RFC 5280 allows no other form).
fn asn1_time(tag: u8, text: &[u8]) -> Option<u64> {
    let digits = |b: &[u8]| -> Option<i64> {
        b.iter().try_fold(0i64, |a, &c| {
            c.is_ascii_digit().then(|| a * 10 + i64::from(c - b'0'))
        })
    };
    let (year, rest) = match (tag, text.len()) {
        (0x17, 13) => {
            let yy = digits(&text[..2])?;
            (if yy >= 50 { 1900 + yy } else { 2000 + yy }, &text[2..])
        }
        (0x18, 15) => (digits(&text[..4])?, &text[4..]),
        _ => return None,
    };
    if rest[10] != b'Z' {
        return None;
    }
    let [month, day, hour, minute, second] = [0, 2, 4, 6, 8].map(|i| digits(&rest[i..i + 2]));
    let (month, day) = (month?, day?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // Days since 1970-01-01 of a Gregorian date (Howard Hinnant's days_from_civil, years ≥ 0).
    let y = if month <= 2 { year - 1 } else { year };
    let m = if month <= 2 { month + 9 } else { month - 3 };
    let (era, yoe) = (y / 400, y % 400);
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour? * 3_600 + minute? * 60 + second?;
    Some(secs.max(0) as u64)
}

/// `--insecure`: accepts every certificate, while still checking that the server holds the key of
/// the one it showed (what curl `-k` does).
#[derive(Debug)]
struct NoVerify(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_s_failures_are_said_in_words_with_both_ways_out() {
        let (w, cert) = words(
            &rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
            "127.0.0.1",
        );
        assert!(cert && w.contains("unknown issuer"), "{w}");
        let (w, _) = words(
            &rustls::Error::InvalidCertificate(CertificateError::ExpiredContext {
                time: UnixTime::since_unix_epoch(std::time::Duration::from_secs(1_800_000_000)),
                not_after: UnixTime::since_unix_epoch(std::time::Duration::from_secs(
                    1_577_923_200,
                )),
            }),
            "localhost",
        );
        assert!(w.contains("expired") && w.contains("2020-01-02"), "{w}");
        let f = TlsFailure {
            host: "h".into(),
            why: w,
            certificate: true,
            plain_http: false,
        };
        assert!(f.refusal().contains("--cacert") && f.refusal().contains("--insecure"));
    }

    /// Self-signed, `CA:TRUE`, for 127.0.0.1, valid from 2020-01-01 to 2020-01-02 (`openssl ca
    /// -selfsign -startdate 20200101000000Z -enddate 20200102000000Z`).
    const EXPIRED: &str = "-----BEGIN CERTIFICATE-----
MIIBWjCCAQCgAwIBAgIBATAKBggqhkjOPQQDAjAUMRIwEAYDVQQDDAlsb2NhbGhv
c3QwHhcNMjAwMTAxMDAwMDAwWhcNMjAwMTAyMDAwMDAwWjAUMRIwEAYDVQQDDAls
b2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjOPQMBBwNCAAQGa+kb8xi49vOWTelT
g03HT07EDrKAvp69OWJ/+ckN16kr5BOpZv+Y9f8rDlGsa+qHO5PKvJPxMFApeh7N
vA8Ro0MwQTAPBgNVHRMBAf8EBTADAQH/MA8GA1UdEQQIMAaHBH8AAAEwHQYDVR0O
BBYEFJyNMRXMcT7AiLqKMJUCznS/8FuTMAoGCCqGSM49BAMCA0gAMEUCIAF9rPyY
klM2QWtbqruA7yYBZ6p73vttf3pv/gKLpuXVAiEA+Ob0WQAmihIgQQx3o149BtXX
9el5YHKkZvjrT17xQwI=
-----END CERTIFICATE-----
";

    #[test]
    fn a_certificate_trusted_as_itself_still_has_its_validity_period_checked() {
        use rustls::pki_types::pem::PemObject;
        let cert = CertificateDer::from_pem_slice(EXPIRED.as_bytes()).unwrap();
        assert_eq!(
            validity(cert.as_ref()),
            Some((1_577_836_800, 1_577_923_200))
        );
        let at = |s| UnixTime::since_unix_epoch(std::time::Duration::from_secs(s));
        assert!(check_validity(&cert, at(1_577_900_000)).is_ok());
        let e = check_validity(&cert, at(1_800_000_000)).unwrap_err();
        let (w, _) = words(&e, "127.0.0.1");
        assert!(
            w.contains("it has expired: it was valid until 2020-01-02T00:00:00Z"),
            "{w}"
        );
        let e = check_validity(&cert, at(1_500_000_000)).unwrap_err();
        assert!(words(&e, "127.0.0.1").0.contains("not valid yet"), "{e}");
        // Cut short or not a certificate: refused as a bad encoding, never trusted.
        assert!(validity(&cert.as_ref()[..40]).is_none());
        assert!(check_validity(&CertificateDer::from(vec![0x30, 0x00]), at(0)).is_err());
        // Both time forms, and the century of a UTCTime.
        assert_eq!(asn1_time(0x18, b"20500101000000Z"), Some(2_524_608_000));
        assert_eq!(asn1_time(0x17, b"491231235959Z"), Some(2_524_607_999));
        assert_eq!(asn1_time(0x17, b"500101000000Z"), Some(0));
        assert_eq!(asn1_time(0x17, b"200101000000+0100"), None);
        assert_eq!(asn1_time(0x18, b"2020013100000Z"), None);
    }

    #[test]
    fn a_cacert_that_is_not_pem_is_named_by_its_flag() {
        let dir = std::env::temp_dir().join(format!("witness-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("not.pem");
        std::fs::write(&f, "hello\n").unwrap();
        let e = read_cacert(&f).unwrap_err();
        assert!(
            e.starts_with("--cacert") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = read_cacert(&dir.join("missing.pem")).unwrap_err();
        assert!(
            e.starts_with("--cacert") && e.contains("could not read"),
            "{e}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}

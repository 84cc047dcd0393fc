"""The key outputs are signed with: the user's own certificate and key, else this installation's own.

A user's key: `run --sign-cert CERT.pem --sign-key KEY.pem`, or FACESTUDIO_SIGN_CERT / FACESTUDIO_SIGN_KEY (the
settings of a server or the web UI). CERT.pem holds the signing certificate first, then its chain (PEM);
KEY.pem the private key (PEM, unencrypted): EC P-256/P-384/P-521, Ed25519 or RSA (≥ 2048 bits).

Without one, a per-installation key is made on first use in $FACESTUDIO_HOME/provenance/ (default
~/.config/facestudio/provenance): a local certificate authority (`ca.pem`, kept to recognise this installation's
outputs in `verify`) and a signing certificate it issued (`signer.pem`, `signer.key`, mode 0600). Its
credentials prove that a file is unchanged since this installation signed it; they name no person and no
public authority vouches for them.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from engine.core.errors import InvalidInput
from engine.core.home import home as user_home

ENV_CERT = "FACESTUDIO_SIGN_CERT"
ENV_KEY = "FACESTUDIO_SIGN_KEY"

Origin = Literal["user", "installation"]
# What `c2pa.C2paSigningAlg` calls each key type (RSA keys sign with PSS, as C2PA requires).
_CURVES = {"secp256r1": "es256", "secp384r1": "es384", "secp521r1": "es512"}
_VALID_YEARS = 10


@dataclass(frozen=True)
class SigningKey:
    """A certificate chain (PEM: the signing certificate first) and its private key (PEM), with the algorithm
    they sign with (`es256`, `es384`, `es512`, `ed25519` or `ps256`). `origin`: whose key it is; `anchor`: for the
    installation's key, its CA certificate (PEM), which lets `verify` recognise this installation's outputs."""

    chain: bytes
    key: bytes
    alg: str
    origin: Origin
    anchor: bytes | None = None

    @property
    def subject(self) -> str:
        """The signing certificate's subject, e.g. `CN=facestudio signer,O=facestudio installation 3f2a…`."""
        return x509.load_pem_x509_certificate(self.chain).subject.rfc4514_string()


def home() -> Path:
    """$FACESTUDIO_HOME/provenance (default ~/.config/facestudio/provenance): the installation's key."""
    return user_home() / "provenance"


def resolve(cert: Path | None = None, key: Path | None = None) -> SigningKey:
    """The key to sign with: `cert` and `key` (both or neither), else FACESTUDIO_SIGN_CERT/_KEY, else the
    installation's key (made now when there is none). InvalidInput naming the flag for unusable files."""
    if (cert is None) != (key is None):
        raise InvalidInput("--sign-cert and --sign-key go together: give both, or neither for this installation's key")
    if cert is not None and key is not None:
        return load(cert, key, "--sign-cert", "--sign-key")
    env_cert, env_key = os.environ.get(ENV_CERT), os.environ.get(ENV_KEY)
    if env_cert or env_key:
        if not (env_cert and env_key):
            raise InvalidInput(f"{ENV_CERT} and {ENV_KEY} go together: set both, or neither")
        return load(Path(env_cert), Path(env_key), ENV_CERT, ENV_KEY)
    return installation_key()


def load(cert: Path, key: Path, cert_name: str = "certificate", key_name: str = "key") -> SigningKey:
    """Read a user's PEM certificate chain and private key, checking that they belong together."""
    chain = _read(cert, cert_name)
    key_pem = _read(key, key_name)
    try:
        certs = x509.load_pem_x509_certificates(chain)
    except ValueError:
        raise InvalidInput(f"{cert_name} {cert.name} holds no PEM certificate") from None
    try:
        private = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError) as exc:
        reason = "is encrypted: give it unencrypted" if isinstance(exc, TypeError) else "is not a PEM private key"
        raise InvalidInput(f"{key_name} {key.name} {reason}") from None
    alg = _algorithm(private, f"{key_name} {key.name}")
    if not _matches(certs[0], private):
        raise InvalidInput(f"{key_name} {key.name} is not the key of the first certificate in {cert_name} {cert.name}")
    now = datetime.datetime.now(datetime.UTC)
    if not certs[0].not_valid_before_utc <= now <= certs[0].not_valid_after_utc:
        raise InvalidInput(
            f"the certificate in {cert_name} {cert.name} is valid {certs[0].not_valid_before_utc:%Y-%m-%d} to "
            f"{certs[0].not_valid_after_utc:%Y-%m-%d}, not now"
        )
    return SigningKey(chain, key_pem, alg, "user")


def installation_key() -> SigningKey:
    """This installation's key, made on first use (and again once its certificate has expired)."""
    folder = home()
    found = _read_installation_key(folder)
    if found is not None:
        return found
    # Made in a folder of its own and renamed into place: two processes starting at once (the UI and a CLI run)
    # end up with one key, never with one's certificate beside the other's key.
    folder.parent.mkdir(parents=True, exist_ok=True)
    fresh = Path(tempfile.mkdtemp(prefix=".provenance-", dir=folder.parent))
    try:
        _make_installation_key(fresh)
        found = _read_installation_key(folder)
        if found is not None:  # another process put its key in place while this one made its own
            return found
        if folder.exists():  # incomplete or expired
            stale = folder.with_name(f".{folder.name}-stale-{os.getpid()}")
            os.replace(folder, stale)
            shutil.rmtree(stale, ignore_errors=True)
        with contextlib.suppress(OSError):  # another process put its key in place first: that one is used
            os.rename(fresh, folder)
    finally:
        shutil.rmtree(fresh, ignore_errors=True)
    found = _read_installation_key(folder)
    if found is None:
        raise InvalidInput(f"this installation's signing key could not be made in {folder.name}/ (FACESTUDIO_HOME)")
    return found


def _read_installation_key(folder: Path) -> SigningKey | None:
    """The key in `folder` when it is complete and its certificate valid for at least another day."""
    paths = [folder / name for name in ("ca.pem", "signer.pem", "signer.key")]
    if not all(p.is_file() for p in paths):
        return None
    try:
        anchor, chain, key_pem = (p.read_bytes() for p in paths)
    except OSError:  # replaced by another process meanwhile
        return None
    try:
        leaf = x509.load_pem_x509_certificate(chain)
        private = serialization.load_pem_private_key(key_pem, password=None)
    except ValueError:
        return None
    if leaf.not_valid_after_utc < datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=1):
        return None
    return SigningKey(chain, key_pem, _algorithm(private, "the installation key"), "installation", anchor)


def _make_installation_key(folder: Path) -> None:
    """Write a local CA (`ca.pem`) and a signing certificate it issues (`signer.pem`, `signer.key`) to `folder`:
    C2PA validators refuse self-signed signing certificates. ES256; the signing certificate has the
    digitalSignature usage and the emailProtection purpose C2PA accepts."""
    now = datetime.datetime.now(datetime.UTC)
    label = os.urandom(4).hex()  # tells one installation's certificates from another's
    org = f"facestudio installation {label}"
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(f"facestudio local CA {label}", org)
    ca = (
        _certificate(ca_name, ca_name, ca_key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        _certificate(_name("facestudio signer", org), ca_name, key.public_key(), now)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.EMAIL_PROTECTION]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    anchor = ca.public_bytes(serialization.Encoding.PEM)
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    # The CA's own private key is not kept: nothing but this one signing certificate is ever issued from it.
    _write(folder / "signer.key", key_pem, private=True)
    _write(folder / "signer.pem", leaf.public_bytes(serialization.Encoding.PEM) + anchor)
    _write(folder / "ca.pem", anchor)


def _certificate(subject: x509.Name, issuer: x509.Name, public: ec.EllipticCurvePublicKey, now: datetime.datetime):
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365 * _VALID_YEARS))
    )


def _name(common: str, org: str) -> x509.Name:
    return x509.Name(
        [x509.NameAttribute(NameOID.COMMON_NAME, common), x509.NameAttribute(NameOID.ORGANIZATION_NAME, org)]
    )


def _usage(*, cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign, content_commitment=False, key_encipherment=False, data_encipherment=False,
        key_agreement=False, key_cert_sign=cert_sign, crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _write(path: Path, data: bytes, *, private: bool = False) -> None:
    """A private key is readable by its owner only from the moment it exists."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def _read(path: Path, name: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except FileNotFoundError:
        raise InvalidInput(f"{name} {Path(path).name} does not exist") from None
    except OSError as exc:
        raise InvalidInput(f"{name} {Path(path).name} cannot be read: {exc.strerror}") from None


def _algorithm(private: object, what: str) -> str:
    if isinstance(private, ec.EllipticCurvePrivateKey) and private.curve.name in _CURVES:
        return _CURVES[private.curve.name]
    if isinstance(private, ed25519.Ed25519PrivateKey):
        return "ed25519"
    if isinstance(private, rsa.RSAPrivateKey) and private.key_size >= 2048:
        return "ps256"
    raise InvalidInput(f"{what} is not a key C2PA signs with: use EC P-256/P-384/P-521, Ed25519 or RSA ≥ 2048 bits")


def _matches(cert: x509.Certificate, private: object) -> bool:
    """Whether `private` is the key of `cert`: it signs a probe that the certificate's public key accepts."""
    probe = b"facestudio key check"
    public = cert.public_key()
    try:
        if isinstance(private, ec.EllipticCurvePrivateKey) and isinstance(public, ec.EllipticCurvePublicKey):
            public.verify(private.sign(probe, ec.ECDSA(hashes.SHA256())), probe, ec.ECDSA(hashes.SHA256()))
        elif isinstance(private, ed25519.Ed25519PrivateKey) and isinstance(public, ed25519.Ed25519PublicKey):
            public.verify(private.sign(probe), probe)
        elif isinstance(private, rsa.RSAPrivateKey) and isinstance(public, rsa.RSAPublicKey):
            pss = padding.PSS(mgf=padding.MGF1(hashes.SHA256()), salt_length=padding.PSS.MAX_LENGTH)
            public.verify(private.sign(probe, pss, hashes.SHA256()), probe, pss, hashes.SHA256())
        else:
            return False
    except InvalidSignature:
        return False
    return True

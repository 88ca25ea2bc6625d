"""Signed checkpoints: OpenSSF model-signing signatures of a checkpoint folder.

:func:`sign_checkpoint` writes ``model.sig`` (:data:`cairn.manifest.SIGNATURE`)
into a checkpoint's root folder, in the format of the OpenSSF ``model-signing``
package (v1.x, its ``key`` method): a Sigstore bundle (media type
``application/vnd.dev.sigstore.bundle.v0.3+json``) whose DSSE envelope carries
an in-toto statement (``https://in-toto.io/Statement/v1``, predicate
``https://model_signing/signature/v1.0``) that lists every file of the
checkpoint with its SHA-256, signed with an elliptic-curve key (P-256, P-384 or
P-521; ECDSA with SHA-256, SHA-384 or SHA-512). No network, no transparency
log: the public key is the trust anchor. ``model_signing verify key CKPT
--signature CKPT/model.sig --public_key KEY.pub`` accepts what cairn signs,
and :func:`verify_signature` accepts what that tool signs with a key.

:func:`verify_signature` checks, before anything of the checkpoint's state is
read: the envelope's signature over the statement (cheap: one ECDSA check on a
small file), then that the statement lists exactly the files the checkpoint's
manifests list, that no other file lies in the folder, and that each file's
SHA-256 is the signed one. It never follows links and reads at most
:data:`MAX_SIGNATURE_BYTES` of the signature file.

The crypto is the ``cryptography`` package's (the ``sign`` extra:
``pip install 'cairn-rl[sign]'``); it is imported only when a key is used, so
``import cairn`` stays light.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hashlib
import json
import os
import uuid
from typing import TYPE_CHECKING, Any

from cairn._reader import FolderReader, resolve_user_link
from cairn.errors import CheckpointError, CheckpointNotFoundError, CorruptCheckpointError, SignatureError
from cairn.manifest import (
    MANIFEST,
    MAX_COMPONENT_DEPTH,
    MAX_JSON_BYTES,
    SIGNATURE,
    SIGNATURE_TEMPORARY,
    Digest,
    FileEntry,
    load_json,
)
from cairn.storage.base import FileTooLargeError, Storage
from cairn.storage.resolve import resolve_storage

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ec import EllipticCurvePrivateKey, EllipticCurvePublicKey
    from cryptography.hazmat.primitives.hashes import HashAlgorithm

__all__ = ["MAX_SIGNATURE_BYTES", "KeySource", "check_keys", "sign_checkpoint", "signed_root", "verify_signature"]

KeySource = str | os.PathLike[str] | bytes
"""A key: the path of a PEM file (``str`` or path-like, on the local disk), or the PEM bytes themselves."""

MAX_SIGNATURE_BYTES = MAX_JSON_BYTES
"""The largest ``model.sig`` a reader accepts (64 MB: a statement of some 300,000 files)."""

BUNDLE_MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://model_signing/signature/v1.0"

# The curves model-signing's key verifier accepts, and the hash its ECDSA uses with each.
_CURVE_HASHES = {"secp256r1": "SHA256", "secp384r1": "SHA384", "secp521r1": "SHA512"}
_MAX_KEY_BYTES = 1 << 20  # a PEM key is a few hundred bytes
SIGNED_ALGORITHMS = ("sha256", "blake3")
"""The file digests a signature may use: model-signing's names for the digests cairn's manifests record."""
# The temporary file a local signing writes before renaming it to model.sig.
_TEMPORARY = SIGNATURE_TEMPORARY


# ----------------------------------------------------------------------------------------------
# Public API


def check_keys(*, private_key: KeySource | None = None, public_key: KeySource | None = None) -> None:
    """Load the keys given, so that a missing, unreadable or unsupported key fails now, not at first use.

    Raises:
        CheckpointError: A key cannot be read, is encrypted (a private key: sign with
            :func:`sign_checkpoint`'s ``password``), or is of a kind model-signing does not verify.
    """
    if private_key is not None:
        _load_private_key(private_key, None)
    if public_key is not None:
        _load_public_key(public_key)


def sign_checkpoint(
    path: str | os.PathLike[str],
    private_key: KeySource,
    *,
    password: bytes | None = None,
    filesystem: Any = None,
    check_files: bool = True,
    committed: FileEntry | None = None,
) -> str:
    """Sign the committed checkpoint at ``path``; write its ``model.sig`` and return where.

    The signature covers every file the checkpoint's manifests list, each by the
    digest its manifests record, BLAKE3 or SHA-256 (see :func:`_file_digests`). Re-signing replaces the previous
    signature. On a local disk the file is written beside its final name and
    renamed into place, so a reader sees the old signature or the new one, never
    half of one; on object stores one upload is atomic.

    Args:
        path: The checkpoint's root folder (a local path or an fsspec URI).
        private_key: An elliptic-curve private key (P-256, P-384 or P-521) in PEM:
            the path of the file, or its bytes.
        password: The key's password, when the PEM file is encrypted.
        filesystem: An fsspec filesystem ``path`` lives on (see ``save_to_path``).
        check_files: Read every file first and refuse one that does not match its
            manifest (the default: a damaged checkpoint is never sealed). A
            :class:`cairn.CheckpointManager` signing the checkpoint it just wrote passes
            False: its digests were computed from the bytes as they were written.
        committed: Sign only the checkpoint whose root manifest is this one (its size and
            digest: what a save committed, ``WriteStats.root``), and check again once the
            signature is written. A :class:`cairn.CheckpointManager` passes it, so that it
            never signs what another writer put at the same path meanwhile.

    Returns:
        The location of the signature file (``<path>/model.sig``).

    Raises:
        CheckpointNotFoundError: No committed checkpoint at ``path``.
        CorruptCheckpointError: A file does not match its manifest, or the folder
            holds files its manifests do not list (a signature must cover exactly the
            checkpoint's files): nothing damaged gets sealed.
        CheckpointError: The key cannot be read or is of a kind model-signing does not
            verify; the ``cryptography`` package is missing; the signature cannot be written;
            a format 1 checkpoint (``cairn upgrade`` it first); with ``committed``, the folder
            holds another checkpoint (another writer saved there).
    """
    key = _load_private_key(private_key, password)  # a bad key fails before any file is read
    storage, root = resolve_storage(path, filesystem)
    root = resolve_user_link(storage, root)  # the path typed may be a link; links inside are refused
    _refuse_a_switch(storage, root)
    try:
        algorithm, digests = _file_digests(storage, root, refuse=CheckpointError, committed=committed)
    except CorruptCheckpointError as err:
        if committed is None:
            raise
        raise _replaced(storage.uri(root), err) from err
    if check_files:
        from cairn._verify import verify

        problems = verify(path, filesystem)
        if problems:
            raise CorruptCheckpointError(f"Cannot sign {storage.uri(root)}: {problems[0]}")
    _remove_stale_temporaries(storage, root)
    extra = sorted(_present_files(storage, root, refuse=CorruptCheckpointError) - set(digests) - {SIGNATURE})
    if extra:
        raise CorruptCheckpointError(
            f"Cannot sign {storage.uri(root)}: it holds {_names(extra)}, which its manifests do not list. A "
            "signature covers exactly a checkpoint's files; move those files out of the folder and sign again."
        )
    payload = _statement_bytes(_model_name(storage, root), digests, algorithm)
    bundle = _bundle(payload, key)
    target = storage.join(root, SIGNATURE)
    write_atomically(storage, root, SIGNATURE, bundle)
    if committed is not None:
        # Replaced after the digests were read: the signature (of this save's digests) does not verify
        # for what the folder holds now, but the save must hear that its checkpoint is not there.
        try:
            FolderReader(storage, root, expected=committed).manifest  # noqa: B018 - read and checked
        except CheckpointError as err:
            raise _replaced(storage.uri(root), err) from err
    return storage.uri(target)


def _refuse_a_switch(storage: Storage, root: str) -> None:
    """Refuse to sign ``root`` while a save over it is switching its new checkpoint into place."""
    staged = storage.locate(root)
    if staged != root:
        # A signature written into the staging folder may miss the copy into place; one written at the
        # path may be deleted by it (a file the new checkpoint does not have). Signed once it is in place.
        raise CheckpointError(
            f"Cannot sign {storage.uri(root)} now: a save over it is switching its new checkpoint into place "
            f"(readers load it from {storage.uri(staged)} meanwhile). Sign it once the switch is done: the save "
            "finishes it, or, if that writer died, the next save at this path or a CheckpointManager's cleanup."
        )


def _replaced(where: str, err: CheckpointError) -> CheckpointError:
    return CheckpointError(
        f"Did not sign {where}: it no longer holds the checkpoint this save committed ({err}). Another writer "
        "saved at the same path meanwhile; a signature covers only what its signer wrote. Give each writer its "
        "own root, or its own steps."
    )


def verify_signature(
    path: str | os.PathLike[str],
    public_key: KeySource,
    *,
    filesystem: Any = None,
) -> None:
    """Check that the checkpoint at ``path`` is signed by ``public_key`` and unchanged since.

    Checks the signature over the statement, that the statement lists exactly the
    checkpoint's files with the SHA-256 its manifests record, and then every file's
    bytes against those digests (``cairn verify``). It never decodes state,
    constructs classes or follows links, so it is the check to run before a restore
    of a checkpoint from elsewhere; ``restore_from_path(public_key=...)`` and
    ``from_checkpoint(public_key=...)`` do the same in one pass (:func:`signed_root`,
    then the restore's own check of every byte it reads). Signatures made by
    ``model_signing sign key`` verify as well as cairn's own.

    Args:
        path: The checkpoint's root folder (a local path or an fsspec URI).
        public_key: The elliptic-curve public key in PEM (SubjectPublicKeyInfo): the
            path of the file, or its bytes.
        filesystem: An fsspec filesystem ``path`` lives on.

    Raises:
        SignatureError: The signature is missing, unreadable, made with another key
            or over another statement, or the files differ from the signed ones
            (changed, missing, or added).
        CheckpointNotFoundError: No checkpoint at ``path``.
        CheckpointError: The public key cannot be read, or ``cryptography`` is missing.
    """
    signed_root(path, public_key, filesystem=filesystem)
    from cairn._verify import verify

    problems = verify(path, filesystem)
    if problems:
        raise SignatureError(
            f"{path} does not match its signature: {problems[0]}"
            + (f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else "")
        )


def signed_root(path: str | os.PathLike[str], public_key: KeySource, *, filesystem: Any = None) -> FileEntry:
    """:func:`verify_signature`, returning the signed root manifest's entry (size and SHA-256).

    ``restore_from_path(public_key=...)`` and ``from_checkpoint(public_key=...)`` read the
    checkpoint through a root manifest checked against this entry, so a checkpoint
    swapped between the signature check and the restore is refused, not read.

    On an object store the checkpoint is read where the storage says
    (:meth:`~cairn.storage.base.Storage.locate`): while a save over it switches its new
    checkpoint into place, that save's staging folder. A read that a switch moved under
    it (the staging folder deleted once the copy is done, or a switch that began) is
    done again where the path then leads, up to :data:`SWITCH_READS` times: a reader
    racing a switch checks the old checkpoint or the new one.

    Raises:
        SignatureError: See :func:`verify_signature`.
    """
    key = _load_public_key(public_key)
    storage, root = resolve_storage(path, filesystem)
    root = resolve_user_link(storage, root)  # the path typed may be a link; links inside are refused
    for attempt in range(1, SWITCH_READS + 1):
        folder = storage.locate(root)
        try:
            return _check_signed(storage, root, folder, key)
        except (CorruptCheckpointError, CheckpointNotFoundError):  # SignatureError is a CorruptCheckpointError
            if attempt == SWITCH_READS or storage.locate(root) == folder:
                raise  # not moved: the answer for what the path holds
    raise AssertionError("unreachable")  # pragma: no cover


SWITCH_READS = 3
"""Reads of a signed checkpoint that a switch may move (the old one, the staged new one, the new one in place)."""


def _check_signed(storage: Storage, root: str, folder: str, key: EllipticCurvePublicKey) -> FileEntry:
    """:func:`signed_root` of the checkpoint named ``root``, read at ``folder`` (where ``locate`` sent it)."""
    where = storage.uri(storage.join(folder, SIGNATURE))
    data = _read_signature(storage, folder, where, named=root)
    payload = _verified_payload(data, key, where)
    signed_algorithm, signed = _parse_statement(payload, where)
    present = _present_files(storage, folder, refuse=SignatureError) - {SIGNATURE}
    _compare_names(storage.uri(folder), where, signed, present)  # from listings alone: no file read yet
    try:
        algorithm, claimed = _file_digests(storage, folder, refuse=SignatureError, located=True)
    except SignatureError:
        raise
    except CorruptCheckpointError as err:
        raise SignatureError(f"{storage.uri(folder)} does not match its signature {where}: {err}") from err
    if signed_algorithm != algorithm:
        raise SignatureError(
            f"{where} hashes the files with {signed_algorithm}, but the checkpoint {storage.uri(root)} records "
            f"{algorithm} digests. Sign it again with cairn sign, or with model_signing hashing with {algorithm} "
            "(hashing_algorithm / --hash_algorithm)."
        )
    _compare_digests(storage.uri(folder), where, signed, claimed)
    manifest = storage.read_file(storage.join(folder, MANIFEST), max_bytes=MAX_JSON_BYTES)
    entry = FileEntry(len(manifest), Digest(algorithm, signed[MANIFEST]))
    if Digest.of(manifest, algorithm) != entry.digest:  # replaced since its digest was taken above
        raise SignatureError(f"{storage.uri(root)}: its root manifest changed while its signature was checked.")
    return entry


# ----------------------------------------------------------------------------------------------
# The files and their digests


def _file_digests(
    storage: Storage,
    root: str,
    *,
    refuse: type[CheckpointError],
    committed: FileEntry | None = None,
    located: bool = False,
) -> tuple[str, dict[str, str]]:
    """The digest algorithm and digest (hex) of every file the checkpoint's manifests list, by relative path.

    The algorithm is the checkpoint's (format 3: BLAKE3 or SHA-256, as its manifests
    record; format 2: SHA-256). The one source of per-file digests for signing and
    verifying: each folder's manifest records its files' digests and is sealed by its
    parent's, up to the root manifest, whose own digest is computed here: the manifests
    are read (and checked), no other file is. Whether the bytes still match the digests
    is checked by whoever reads them next (a restore, ``cairn verify``), against those
    same manifests, whose root the signature binds (:func:`signed_root`). ``committed``:
    the root manifest must be exactly this one (a save signing what it committed).
    ``located``: ``root`` is where ``Storage.locate`` sent a reader (maybe a switch's staging
    folder), already checked to be committed.

    The one rule for format 1 (CRC-32 only, which anyone can forge): it is refused here,
    so signing, ``cairn verify --public-key`` and every load with ``public_key=`` refuse
    it alike (``refuse`` is the error class), saying to ``cairn upgrade`` it: a CRC-32
    cannot carry a signature to the bytes a restore reads.

    Raises:
        CheckpointNotFoundError: No committed checkpoint at ``root``.
        CorruptCheckpointError: A manifest is unreadable, or not ``committed``.
        CheckpointError: (``refuse``) A format 1 checkpoint.
    """
    entries: dict[str, FileEntry] = {}

    def walk(reader: FolderReader, prefix: str) -> None:
        # A folder's manifest lists its own files and each component's manifest ("comp/manifest.json").
        for name, entry in reader.manifest.files.items():
            entries[prefix + name] = entry
        for comp in reader.manifest.components:
            walk(reader.child(comp), f"{prefix}{comp}/")

    top = FolderReader(storage, root, expected=committed)
    if not located:
        storage.check_committed(root)
    algorithm = top.manifest.algorithm
    if algorithm not in SIGNED_ALGORITHMS:
        raise refuse(
            f"{storage.uri(root)} is in checkpoint format {top.manifest.format_version}, whose manifests record "
            "CRC-32s only: a signature cannot vouch for the bytes a restore reads. Upgrade it (cairn upgrade "
            f"{storage.uri(root)} NEW), then sign NEW."
        )
    walk(top, "")
    out = {MANIFEST: Digest.of(top.manifest_bytes(), algorithm).hex}
    for rel, entry in entries.items():
        out[rel] = entry.digest.hex  # one algorithm throughout: the reader refuses a folder of another
    return algorithm, out


def _present_files(storage: Storage, root: str, *, refuse: type[CorruptCheckpointError]) -> set[str]:
    """Every file below ``root`` as a ``/``-joined relative path, from folder listings only.

    A symbolic link anywhere is refused (``refuse`` is the error class): a signed
    folder holds regular files and folders, and nothing here follows a link.
    Pipes, sockets and devices are listed like files (and so refused as extra
    files, or by the opener when a manifest lists them) without being opened.
    """
    found: set[str] = set()

    def walk(folder: str, prefix: str, depth: int) -> None:
        if depth > MAX_COMPONENT_DEPTH + 1:
            raise refuse(
                f"{storage.uri(folder)} nests folders more than {MAX_COMPONENT_DEPTH} levels deep; cairn never "
                "writes such a checkpoint, so it is hostile or damaged."
            )
        for name in storage.listdir(folder):
            full = storage.join(folder, name)
            if storage.is_symlink(full):
                raise refuse(
                    f"{storage.uri(full)} is a symbolic link; a signed checkpoint holds only regular files and "
                    "folders, and cairn never follows links. Delete the link, or restore the checkpoint from a "
                    "good copy."
                )
            if storage.isdir(full):
                walk(full, f"{prefix}{name}/", depth + 1)
            else:
                found.add(prefix + name)

    if storage.is_symlink(root):
        raise refuse(f"{storage.uri(root)} is a symbolic link; cairn never follows links to a checkpoint.")
    if not storage.isdir(root):
        raise CheckpointNotFoundError(f"No checkpoint at {storage.uri(root)}: the folder does not exist.")
    walk(root, "", 0)
    return found


_FIX = "Restore the checkpoint from a good copy, or sign it again if the change is yours (cairn sign)."


def _compare_names(where_ckpt: str, where_sig: str, signed: dict[str, str], present: set[str]) -> None:
    """Refuse unless the folder holds exactly the signed files (the signature file aside)."""
    unsigned = sorted(present - set(signed))
    if unsigned:
        if all(_TEMPORARY.fullmatch(n) for n in unsigned):
            raise SignatureError(
                f"{where_ckpt} holds {_names(unsigned)}, left by a `cairn sign` that was interrupted; its "
                f"signature {where_sig} may be stale or missing. Sign the checkpoint again (cairn sign), which "
                "removes it."
            )
        raise SignatureError(
            f"{where_ckpt} holds {_names(unsigned)}, which its signature {where_sig} does not cover: files were "
            f"added after it was signed. {_FIX}"
        )
    missing = sorted(set(signed) - present)
    if missing:
        raise SignatureError(
            f"{where_ckpt} lacks {_names(missing)}, which its signature {where_sig} lists: files were removed "
            f"after it was signed. {_FIX}"
        )


def _compare_digests(where_ckpt: str, where_sig: str, signed: dict[str, str], claimed: dict[str, str]) -> None:
    """Refuse unless the checkpoint's manifests list exactly the signed files, each with its signed digest."""
    unlisted = sorted(set(signed) ^ set(claimed))
    if unlisted:
        raise SignatureError(
            f"{where_ckpt}: its signature {where_sig} and its manifests disagree on {_names(unlisted)}; the "
            f"signature was not made for this checkpoint. {_FIX}"
        )
    changed = sorted(name for name, digest in claimed.items() if signed[name] != digest)
    if changed:
        raise SignatureError(
            f"{where_ckpt}: {_names(changed)} changed after the checkpoint was signed (its SHA-256 differs from "
            f"the one {where_sig} records). {_FIX}"
        )


def _names(names: list[str], limit: int = 5) -> str:
    shown = ", ".join(repr(n[:200]) for n in names[:limit])
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return f"{shown}{more}"


def _model_name(storage: Storage, root: str) -> str:
    """The statement's subject name: the folder's own name, as model-signing records it (informative only)."""
    name = root.rstrip("/").replace("\\", "/").rsplit("/", 1)[-1]
    return name or "checkpoint"


# ----------------------------------------------------------------------------------------------
# The statement, the DSSE envelope and the bundle


def _statement_bytes(model_name: str, digests: dict[str, str], algorithm: str) -> bytes:
    """The in-toto statement model-signing v1.0 writes for a folder hashed file by file with ``algorithm``.

    Resources are in model-signing's order (by path components); the subject's
    digest is the SHA-256 of the resources' digests concatenated in that order
    (model-signing's, whatever the files' algorithm).
    """
    names = sorted(digests, key=lambda n: n.split("/"))
    subject = hashlib.sha256(b"".join(bytes.fromhex(digests[n]) for n in names)).hexdigest()
    statement = {
        "_type": STATEMENT_TYPE,
        "subject": [{"name": model_name, "digest": {"sha256": subject}}],
        "predicateType": PREDICATE_TYPE,
        "predicate": {
            "serialization": {
                "method": "files",
                "hash_type": algorithm,
                "allow_symlinks": False,
                # The verifier re-hashes the folder: the signature file itself is no part of it.
                "ignore_paths": [SIGNATURE],
            },
            "resources": [{"name": n, "algorithm": algorithm, "digest": digests[n]} for n in names],
        },
    }
    return json.dumps(statement, indent=2).encode("utf-8")


def _pae(payload: bytes) -> bytes:
    """DSSE v1's pre-authentication encoding of an in-toto payload: the bytes the signature covers."""
    return b"DSSEv1 %d %s %d %s" % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(payload), payload)


def _bundle(payload: bytes, key: EllipticCurvePrivateKey) -> bytes:
    """A Sigstore bundle (v0.3) holding the DSSE envelope of ``payload``, signed with ``key``."""
    from cryptography.hazmat.primitives.asymmetric import ec

    sig = key.sign(_pae(payload), ec.ECDSA(_hash_for(key.public_key())))
    bundle = {
        "mediaType": BUNDLE_MEDIA_TYPE,
        # model-signing's hint: the SHA-256 of the public key's PEM, so that a verifier
        # given another key says so instead of "invalid signature".
        "verificationMaterial": {"publicKey": {"hint": _key_hint(key.public_key())}, "tlogEntries": []},
        "dsseEnvelope": {
            "payload": base64.b64encode(payload).decode("ascii"),
            "payloadType": PAYLOAD_TYPE,
            "signatures": [{"sig": base64.b64encode(sig).decode("ascii"), "keyid": ""}],
        },
    }
    return json.dumps(bundle, separators=(",", ":")).encode("utf-8")


def _read_signature(storage: Storage, root: str, where: str, *, named: str | None = None) -> bytearray:
    """The signature file's bytes: a regular file of at most :data:`MAX_SIGNATURE_BYTES`.

    ``named``: the path the caller named, when ``root`` is where ``Storage.locate`` sent it.
    """
    try:
        return storage.read_file(storage.join(root, SIGNATURE), max_bytes=MAX_SIGNATURE_BYTES)
    except FileNotFoundError as err:
        if not storage.isdir(root):
            raise CheckpointNotFoundError(f"No checkpoint at {storage.uri(root)}: the folder does not exist.") from err
        path = storage.uri(named if named is not None else root)
        staged = (
            f" (its new checkpoint, read from {storage.uri(root)} while a save switches it into place: it is "
            "signed once the switch is done)"
            if named is not None and named != root
            else ""
        )
        raise SignatureError(
            f"{path} is not signed{staged}: it has no {SIGNATURE}. Sign it with `cairn sign "
            f"{path} --key KEY.pem`, or load it only if you trust where it came from."
        ) from err
    except FileTooLargeError as err:
        raise SignatureError(
            f"{where} is over {MAX_SIGNATURE_BYTES} bytes, larger than any signature cairn reads; it is corrupt "
            "or hostile."
        ) from err
    except CorruptCheckpointError as err:  # a link, pipe, socket or device, refused unopened
        raise SignatureError(f"The signature of {storage.uri(root)} cannot be used: {err}") from err
    except OSError as err:
        raise SignatureError(f"{where} cannot be read: {err}.") from err


def _verified_payload(data: bytes | bytearray, key: EllipticCurvePublicKey, where: str) -> bytes:
    """Parse the bundle, check its DSSE signature with ``key``; return the signed statement's bytes."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        bundle = load_json(data, where=where)
    except CorruptCheckpointError as err:
        raise SignatureError(f"{err} A signature file is a Sigstore bundle in JSON.") from err
    bad = f"{where} is not a model-signing signature"
    if not isinstance(bundle, dict):
        raise SignatureError(f"{bad}: it is not a JSON object.")
    if bundle.get("mediaType") != BUNDLE_MEDIA_TYPE:
        raise SignatureError(f"{bad}: its mediaType is {_short(bundle.get('mediaType'))}, not {BUNDLE_MEDIA_TYPE!r}.")
    envelope = bundle.get("dsseEnvelope")
    if not isinstance(envelope, dict):
        raise SignatureError(f"{bad}: it holds no DSSE envelope (dsseEnvelope).")
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures or not isinstance(signatures[0], dict):
        raise SignatureError(f"{bad}: its DSSE envelope holds no signature.")
    payload = _b64(envelope.get("payload"), f"{where}: the envelope's payload")
    sig = _b64(signatures[0].get("sig"), f"{where}: the envelope's signature")
    material = bundle.get("verificationMaterial")
    hint = None
    if isinstance(material, dict) and isinstance(material.get("publicKey"), dict):
        hint = material["publicKey"].get("hint")
    if hint is not None and hint != _key_hint(key):
        raise SignatureError(
            f"{where} was made with another key (its key hint is {_short(hint)}, the public key given has "
            f"{_key_hint(key)!r}): the checkpoint is not signed by the key you trust."
        )
    # model-signing checks the first signature only, over the in-toto payload type; so does cairn,
    # so that both verifiers accept the same files.
    try:
        key.verify(sig, _pae(payload), ec.ECDSA(_hash_for(key)))
    except InvalidSignature as err:
        raise SignatureError(
            f"{where} does not verify with the public key given: the checkpoint is signed by another key, or the "
            "signature file was altered."
        ) from err
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise SignatureError(
            f"{where}: the DSSE payload type is {_short(envelope.get('payloadType'))}, not {PAYLOAD_TYPE!r}; "
            "it is not a model signature."
        )
    return payload


def _parse_statement(payload: bytes, where: str) -> tuple[str, dict[str, str]]:
    """The signed statement's files and their SHA-256 (hex), checked for shape and consistency."""
    try:
        statement = load_json(payload, where=f"{where}: the signed statement")
    except CorruptCheckpointError as err:
        raise SignatureError(str(err)) from err
    bad = f"{where}: the signed statement"
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise SignatureError(f"{bad} is not an in-toto statement ({STATEMENT_TYPE}).")
    if statement.get("predicateType") != PREDICATE_TYPE:
        raise SignatureError(
            f"{bad} has predicate type {_short(statement.get('predicateType'))}; cairn reads model-signing's "
            f"{PREDICATE_TYPE!r} (sign again with cairn sign or model-signing 1.x)."
        )
    predicate = statement.get("predicate")
    subjects = statement.get("subject")
    if not isinstance(predicate, dict) or not isinstance(subjects, list) or len(subjects) != 1:
        raise SignatureError(f"{bad} lacks its predicate or its one subject.")
    serialization = predicate.get("serialization")
    if not isinstance(serialization, dict) or serialization.get("method") != "files":
        raise SignatureError(
            f"{bad} was not made file by file (serialization method "
            f"{_short(serialization.get('method') if isinstance(serialization, dict) else None)}); cairn checks "
            "whole files. Sign with cairn sign, or model_signing without sharding."
        )
    algorithm = serialization.get("hash_type")
    if algorithm not in SIGNED_ALGORITHMS:
        raise SignatureError(
            f"{bad} hashes with {_short(algorithm)}; cairn checks {' or '.join(SIGNED_ALGORITHMS)} (the digests its "
            "checkpoints record)."
        )
    assert isinstance(algorithm, str)  # one of SIGNED_ALGORITHMS
    resources = predicate.get("resources")
    if not isinstance(resources, list):
        raise SignatureError(f"{bad} lists no resources.")
    files: dict[str, str] = {}
    whole = hashlib.sha256()
    for r in resources:
        name = r.get("name") if isinstance(r, dict) else None
        digest = r.get("digest") if isinstance(r, dict) else None
        if not isinstance(r, dict) or r.get("algorithm") != algorithm or not _is_digest_hex(digest):
            raise SignatureError(f"{bad} lists a resource that is not a file with a {algorithm} digest: {_short(r)}.")
        assert isinstance(digest, str)  # _is_digest_hex checked it
        problem = _path_problem(name)
        if problem is not None:
            raise SignatureError(f"{bad} lists the file {_short(name)}, which {problem}; the signature is hostile.")
        assert isinstance(name, str)  # _path_problem checked it
        if name in files:
            raise SignatureError(f"{bad} lists the file {name!r} twice.")
        files[name] = digest
        whole.update(bytes.fromhex(digest))
    subject = subjects[0]
    subject_digest = subject.get("digest") if isinstance(subject, dict) else None
    recorded = subject_digest.get("sha256") if isinstance(subject_digest, dict) else None
    if recorded != whole.hexdigest():
        raise SignatureError(
            f"{bad} is inconsistent: its subject's digest {_short(recorded)} is not the digest of its resources "
            f"({whole.hexdigest()})."
        )
    return algorithm, files


def _path_problem(name: object) -> str | None:
    """Why ``name`` cannot name a file inside the checkpoint folder, or None."""
    if not isinstance(name, str) or not name:
        return "is not a path"
    if name.startswith("/") or "\\" in name or "\x00" in name:
        return "is not a relative path inside the folder"
    if any(part in ("", ".", "..") for part in name.split("/")):
        return "leads outside the folder or is not a plain path"
    return None


def _is_digest_hex(value: object) -> bool:
    """A 32-byte digest in lower-case hex (SHA-256 and BLAKE3 alike)."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _b64(value: object, what: str) -> bytes:
    if not isinstance(value, str):
        raise SignatureError(f"{what} is missing.")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as err:
        raise SignatureError(f"{what} is not valid base64 ({err}); the signature file is corrupt.") from err


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


# ----------------------------------------------------------------------------------------------
# Keys


def _crypto_missing(err: ImportError) -> CheckpointError:
    return CheckpointError(
        f"Signed checkpoints need the 'cryptography' package ({err}). Run: pip install 'cairn-rl[sign]'."
    )


def _key_bytes(source: KeySource, what: str) -> tuple[bytes, str]:
    """The PEM bytes of a key given as a path or as bytes, and how to name it in messages."""
    if isinstance(source, bytes | bytearray):
        return bytes(source), f"the {what} given as bytes"
    if isinstance(source, str) and "-----BEGIN" in source:
        raise CheckpointError(
            f"The {what} was given as a str holding PEM text; a str is read as a file path. Pass the PEM as "
            "bytes (key.encode()) or the path of the .pem file."
        )
    if not isinstance(source, str | os.PathLike):
        raise CheckpointError(f"The {what} must be the path of a PEM file or its bytes, not a {type(source).__name__}.")
    path = os.fspath(source)
    try:
        with open(path, "rb") as f:
            data = f.read(_MAX_KEY_BYTES + 1)
    except OSError as err:
        raise CheckpointError(f"Cannot read the {what} {path}: {err.strerror or err}.") from err
    if len(data) > _MAX_KEY_BYTES:
        raise CheckpointError(f"The {what} {path} is over {_MAX_KEY_BYTES} bytes; it is no PEM key.")
    return data, f"the {what} {path}"


def _load_private_key(source: KeySource, password: bytes | None) -> EllipticCurvePrivateKey:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError as err:
        raise _crypto_missing(err) from err
    data, label = _key_bytes(source, "private key")
    try:
        key = serialization.load_pem_private_key(data, password=password)
    except TypeError as err:  # encrypted without a password, or a password for a plain key
        raise CheckpointError(
            f"Cannot load {label}: {err} Pass the key's password (sign_checkpoint(..., password=b'...')), or "
            "decrypt it first (openssl pkey -in KEY.pem -out plain.pem)."
        ) from err
    except ValueError as err:
        raise CheckpointError(
            f"Cannot load {label}: it is not a PEM private key, or the password is wrong ({err})."
        ) from err
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name not in _CURVE_HASHES:
        raise CheckpointError(_kind_problem(label, key))
    return key


def _load_public_key(source: KeySource) -> EllipticCurvePublicKey:
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import ec
    except ImportError as err:
        raise _crypto_missing(err) from err
    data, label = _key_bytes(source, "public key")
    try:
        key = serialization.load_pem_public_key(data)
    except ValueError as err:
        raise CheckpointError(
            f"Cannot load {label}: it is not a PEM public key ({err}). Give the .pub file (PEM, "
            "SubjectPublicKeyInfo), e.g. made with: openssl ec -in KEY.pem -pubout -out KEY.pub"
        ) from err
    if not isinstance(key, ec.EllipticCurvePublicKey) or key.curve.name not in _CURVE_HASHES:
        raise CheckpointError(_kind_problem(label, key))
    return key


def _kind_problem(label: str, key: object) -> str:
    curve = getattr(getattr(key, "curve", None), "name", None)
    kind = f"an elliptic-curve key on {curve}" if curve else f"a {type(key).__name__.lstrip('_')}"
    return (
        f"{label.capitalize()} is {kind}; model-signing's key signatures use elliptic-curve keys on P-256, "
        "P-384 or P-521. Make one with: openssl ecparam -name prime256v1 -genkey -noout -out KEY.pem"
    )


def _hash_for(key: EllipticCurvePublicKey) -> HashAlgorithm:
    from cryptography.hazmat.primitives import hashes

    algorithm: HashAlgorithm = getattr(hashes, _CURVE_HASHES[key.curve.name])()
    return algorithm


def _key_hint(key: EllipticCurvePublicKey) -> str:
    from cryptography.hazmat.primitives import serialization

    pem = key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return hashlib.sha256(pem).hexdigest()


# ----------------------------------------------------------------------------------------------
# Writing


def _remove_stale_temporaries(storage: Storage, root: str) -> None:
    """Delete what an interrupted signing left in the root folder (only files of :data:`_TEMPORARY`'s name).

    Another signer's file in flight may go too: its rename then fails with a clear
    error, and this signer's signature (over the same files) is the one that stays.
    """
    if not (storage.atomic_rename and storage.file_descriptors):
        return  # object stores: the signature is one upload, no temporary file
    for name in storage.listdir(root):
        if _TEMPORARY.fullmatch(name):
            with contextlib.suppress(FileNotFoundError):
                storage.remove(storage.join(root, name))


def write_atomically(storage: Storage, root: str, name: str, data: bytes) -> None:
    """Put ``data`` in file ``name`` of folder ``root``, whole or not at all, as readers see it.

    A temporary file (``.NAME.<hex>.tmp``) renamed into place on local disks; one
    upload on object stores (a PUT replaces an object whole).
    """
    target = storage.join(root, name)
    if not (storage.atomic_rename and storage.file_descriptors):
        storage.write_file(target, [data])
        return
    tmp = os.path.join(root, f".{name}.{uuid.uuid4().hex}.tmp")  # for model.sig: matches _TEMPORARY
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)  # replaces a link or an older signature, never writes through one
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except OSError as err:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise CheckpointError(
            f"Writing {target} failed: {err.strerror or err}. Check the permissions and the free "
            "space of the folder; the checkpoint itself is unchanged."
        ) from err

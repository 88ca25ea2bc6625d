"""Signed checkpoints: cairn.sign_checkpoint / verify_signature, `cairn sign`, `cairn verify --public-key`.

Real keys (made with cryptography), real checkpoints saved through the public API, and
OpenSSF model-signing's own verifier (its Python API and its command line) as the
independent judge of the format.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519

import cairn
from cairn.manifest import SIGNATURE
from cairn.testing import assert_states_equal
from cairn_test_components import Tree
from log_helpers import warned

# Its tests tamper with one file of a folder (the per-file layout every cairn reads): tests/conftest.py.
pytestmark = pytest.mark.loose_files

TESTS = Path(__file__).parent
MODEL_SIGNING = Path(sys.executable).with_name("model_signing")
MEDIA_TYPE = "application/vnd.dev.sigstore.bundle.v0.3+json"
PAYLOAD_TYPE = "application/vnd.in-toto+json"


class Keys:
    """A P-256 key pair written as PEM files, and the private key object."""

    def __init__(self, folder: Path, name: str, curve: ec.EllipticCurve) -> None:
        self.private = ec.generate_private_key(curve)
        self.pem = folder / f"{name}.pem"
        self.pub = folder / f"{name}.pub"
        self.pem.write_bytes(
            self.private.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
        self.pub.write_bytes(
            self.private.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"), "signer", ec.SECP256R1())


@pytest.fixture(scope="module")
def other_keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return Keys(tmp_path_factory.mktemp("keys"), "other", ec.SECP384R1())


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    # SHA-256: model-signing's command line hashes with SHA-256 only (its Python API guesses the
    # algorithm from the signature: the BLAKE3 round trips below use it).
    t = Tree()
    t.mutate()
    return Path(t.save_to_path(tmp_path / "ck", digest="sha256"))


@pytest.fixture
def signed(ckpt: Path, keys: Keys) -> Path:
    assert cairn.sign_checkpoint(ckpt, keys.pem) == str(ckpt / SIGNATURE)
    return ckpt


def model_signing_error(folder: Path, pub: Path) -> str | None:
    """None when model-signing's own verifier (its Python API) accepts the folder's model.sig, else why not."""
    import model_signing

    try:
        model_signing.verifying.Config().use_elliptic_key_verifier(public_key=pub).verify(folder, folder / SIGNATURE)
    except (ValueError, OSError) as err:
        return str(err) or type(err).__name__
    return None


def model_signing_cli(folder: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(MODEL_SIGNING),
            "verify",
            "key",
            str(folder),
            "--signature",
            str(folder / SIGNATURE),
            "--public_key",
            str(pub),
        ],
        capture_output=True,
        text=True,
    )


def cairn_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, "-m", "cairn", *args], capture_output=True, text=True, env=env)


def flip(path: Path, at: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2 if at is None else at] ^= 0x01
    path.write_bytes(bytes(data))


def files_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name != SIGNATURE)


# ----------------------------------------------------------------------------------------------
# Round trips


def test_signature_verifies_with_cairn_and_with_model_signing(signed: Path, keys: Keys) -> None:
    cairn.verify_signature(signed, keys.pub)
    cairn.verify_signature(str(signed), keys.pub.read_bytes())  # a key as PEM bytes
    assert model_signing_error(signed, keys.pub) is None
    out = model_signing_cli(signed, keys.pub)
    assert out.returncode == 0 and "Verification succeeded" in out.stdout, out.stdout + out.stderr
    # The statement lists exactly the checkpoint's files, each with its SHA-256.
    bundle = json.loads((signed / SIGNATURE).read_bytes())
    statement = json.loads(base64.b64decode(bundle["dsseEnvelope"]["payload"]))
    resources = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    expected = {p.relative_to(signed).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files_of(signed)}
    assert resources == expected
    assert statement["predicate"]["serialization"]["ignore_paths"] == [SIGNATURE]
    # A flipped byte fails model-signing's command line too.
    flip(signed / "leaf" / "tensors.safetensors")
    bad = model_signing_cli(signed, keys.pub)
    assert bad.returncode == 1 and "leaf/tensors.safetensors" in bad.stderr, bad.stdout + bad.stderr


def test_moved_checkpoint_still_verifies_and_signing_again_replaces(signed: Path, keys: Keys, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere" / "renamed"
    shutil.copytree(signed, moved)
    cairn.verify_signature(moved, keys.pub)  # the subject's name is informative only
    assert model_signing_error(moved, keys.pub) is None
    before = (moved / SIGNATURE).read_bytes()
    cairn.sign_checkpoint(moved, keys.pem.read_bytes())
    assert (moved / SIGNATURE).read_bytes() != before  # ECDSA signatures differ each time
    assert sorted(p.name for p in moved.iterdir()) == sorted(p.name for p in signed.iterdir())  # no temp file left
    cairn.verify_signature(moved, keys.pub)


def test_an_interrupted_signing_is_named_and_cleaned_up_by_the_next(signed: Path, keys: Keys, tmp_path: Path) -> None:
    # What a kill between the write of the temporary file and its rename leaves behind.
    leftover = signed / f".{SIGNATURE}.{'0123456789abcdef' * 2}.tmp"
    leftover.write_bytes((signed / SIGNATURE).read_bytes()[:10])
    with pytest.raises(cairn.SignatureError, match="interrupted"):
        cairn.verify_signature(signed, keys.pub)
    cairn.sign_checkpoint(signed, keys.pem)
    assert not leftover.exists()
    cairn.verify_signature(signed, keys.pub)
    (tmp_path / "link").symlink_to(signed)  # the path the user types may be a link (best -> step_...)
    cairn.verify_signature(tmp_path / "link", keys.pub)
    Tree.from_checkpoint(tmp_path / "link", public_key=keys.pub)


def test_a_signature_made_by_model_signing_verifies_with_cairn(ckpt: Path, keys: Keys) -> None:
    import model_signing

    hashing = model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    model_signing.signing.Config().use_elliptic_key_signer(private_key=keys.pem).set_hashing_config(hashing).sign(
        ckpt, ckpt / SIGNATURE
    )
    cairn.verify_signature(ckpt, keys.pub)
    flip(ckpt / "branch" / "state.msgpack")
    with pytest.raises(cairn.SignatureError, match=r"state\.msgpack"):
        cairn.verify_signature(ckpt, keys.pub)


def test_blake3_checkpoints_sign_and_verify_with_model_signing_both_ways(tmp_path: Path, keys: Keys) -> None:
    """Format 3's default digest: cairn's signature verifies with model-signing's API, and the reverse."""
    import blake3
    import model_signing

    t = Tree()
    t.mutate()
    ck = Path(t.save_to_path(tmp_path / "ck"))
    cairn.sign_checkpoint(ck, keys.pem)
    cairn.verify_signature(ck, keys.pub)
    assert model_signing_error(ck, keys.pub) is None
    statement = json.loads(base64.b64decode(json.loads((ck / SIGNATURE).read_bytes())["dsseEnvelope"]["payload"]))
    assert statement["predicate"]["serialization"]["hash_type"] == "blake3"
    resources = {r["name"]: r["digest"] for r in statement["predicate"]["resources"]}
    assert resources == {p.relative_to(ck).as_posix(): blake3.blake3(p.read_bytes()).hexdigest() for p in files_of(ck)}
    flip(ck / "leaf" / "tensors.safetensors")
    assert "leaf/tensors.safetensors" in (model_signing_error(ck, keys.pub) or "")

    ck2 = Path(t.save_to_path(tmp_path / "ck2"))
    hashing = model_signing.hashing.Config().use_file_serialization(hashing_algorithm="blake3")
    hashing.set_ignored_paths(paths=[SIGNATURE])
    model_signing.signing.Config().use_elliptic_key_signer(private_key=keys.pem).set_hashing_config(hashing).sign(
        ck2, ck2 / SIGNATURE
    )
    cairn.verify_signature(ck2, keys.pub)
    Tree.from_checkpoint(ck2, public_key=keys.pub)
    # Signed over SHA-256 digests, a BLAKE3 checkpoint is refused with what to do.
    model_signing.signing.Config().use_elliptic_key_signer(private_key=keys.pem).set_hashing_config(
        model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    ).sign(ck2, ck2 / SIGNATURE)
    with pytest.raises(cairn.SignatureError, match=r"hashes the files with sha256.*records blake3 digests"):
        cairn.verify_signature(ck2, keys.pub)


def test_object_store_round_trip(keys: Keys) -> None:
    import fsspec

    t = Tree()
    t.mutate()
    uri = t.save_to_path("memory://cairn-sign-tests/ck")
    assert cairn.sign_checkpoint(uri, keys.pem) == f"{uri}/{SIGNATURE}"
    cairn.verify_signature(uri, keys.pub)
    fs = fsspec.filesystem("memory")
    fs.pipe("/cairn-sign-tests/ck/branch/extra.bin", b"x")
    with pytest.raises(cairn.SignatureError, match=r"extra\.bin"):
        cairn.verify_signature(uri, keys.pub)
    fs.rm("/cairn-sign-tests/ck/branch/extra.bin")
    data = bytearray(fs.cat("/cairn-sign-tests/ck/leaf/state.msgpack"))
    data[0] ^= 0x01
    fs.pipe("/cairn-sign-tests/ck/leaf/state.msgpack", bytes(data))
    with pytest.raises(cairn.SignatureError, match=r"leaf/state\.msgpack"):
        cairn.verify_signature(uri, keys.pub)
    fs.rm("/cairn-sign-tests", recursive=True)


# ----------------------------------------------------------------------------------------------
# Tampering after signing


def test_every_flipped_byte_fails_both_verifiers(signed: Path, keys: Keys) -> None:
    files = files_of(signed)
    assert len(files) > 20  # every kind of file: manifests, metadata, ctor, state, tensors, nested
    for f in files:
        original = f.read_bytes()
        for at in (0, len(original) // 2, len(original) - 1):
            flip(f, at)
            with pytest.raises(cairn.SignatureError) as info:
                cairn.verify_signature(signed, keys.pub)
            assert str(f.relative_to(signed)).rsplit("/", 1)[-1] in str(info.value)
            assert model_signing_error(signed, keys.pub) is not None, f
            f.write_bytes(original)
    cairn.verify_signature(signed, keys.pub)


@pytest.mark.parametrize("where", ["", "branch/left/", "new_folder/"])
def test_a_file_added_after_signing_fails_both_verifiers(signed: Path, keys: Keys, where: str) -> None:
    extra = signed / where / "notes.txt"
    extra.parent.mkdir(exist_ok=True)
    extra.write_bytes(b"")
    with pytest.raises(cairn.SignatureError, match=r"notes\.txt.*added after it was signed"):
        cairn.verify_signature(signed, keys.pub)
    assert model_signing_error(signed, keys.pub) is not None


def test_a_removed_file_fails(signed: Path, keys: Keys) -> None:
    (signed / "branch" / "right" / "ctor.json").unlink()
    with pytest.raises(cairn.SignatureError, match=r"branch/right/ctor\.json.*removed"):
        cairn.verify_signature(signed, keys.pub)
    assert model_signing_error(signed, keys.pub) is not None


def test_a_consistent_resave_under_the_signature_fails(signed: Path, keys: Keys, tmp_path: Path) -> None:
    # A valid checkpoint (manifests all consistent) that is not the signed one.
    t = Tree()
    t.mutate()
    t.mutate()
    other = Path(t.save_to_path(tmp_path / "other", digest="sha256"))
    shutil.copy(signed / SIGNATURE, other / SIGNATURE)
    assert cairn.verify_checkpoint(other) == []
    with pytest.raises(cairn.SignatureError, match="changed after the checkpoint was signed"):
        cairn.verify_signature(other, keys.pub)


def test_unsigned_and_wrongly_signed(ckpt: Path, keys: Keys, other_keys: Keys) -> None:
    with pytest.raises(cairn.SignatureError, match=r"is not signed: it has no model\.sig"):
        cairn.verify_signature(ckpt, keys.pub)
    cairn.sign_checkpoint(ckpt, other_keys.pem)
    with pytest.raises(cairn.SignatureError, match="made with another key"):
        cairn.verify_signature(ckpt, keys.pub)
    assert model_signing_error(ckpt, keys.pub) is not None
    # Without the key hint the signature itself decides.
    bundle = json.loads((ckpt / SIGNATURE).read_bytes())
    del bundle["verificationMaterial"]["publicKey"]["hint"]
    (ckpt / SIGNATURE).write_text(json.dumps(bundle))
    with pytest.raises(cairn.SignatureError, match="does not verify with the public key given"):
        cairn.verify_signature(ckpt, keys.pub)
    with pytest.raises(cairn.CheckpointNotFoundError):
        cairn.verify_signature(ckpt.parent / "nothing", keys.pub)


# ----------------------------------------------------------------------------------------------
# Hostile signature files


def forged(statement: Any, key: ec.EllipticCurvePrivateKey, **envelope: Any) -> bytes:
    """A bundle over ``statement`` really signed by ``key`` (written here, independently of cairn)."""
    payload = statement if isinstance(statement, bytes) else json.dumps(statement).encode()
    pae = b"DSSEv1 %d %s %d %s" % (len(PAYLOAD_TYPE), PAYLOAD_TYPE.encode(), len(payload), payload)
    sig = key.sign(pae, ec.ECDSA(hashes.SHA256()))
    env = {
        "payload": base64.b64encode(payload).decode(),
        "payloadType": PAYLOAD_TYPE,
        "signatures": [{"sig": base64.b64encode(sig).decode(), "keyid": ""}],
        **envelope,
    }
    return json.dumps(
        {"mediaType": MEDIA_TYPE, "verificationMaterial": {"tlogEntries": []}, "dsseEnvelope": env}
    ).encode()


def statement_for(folder: Path, names: dict[str, str] | None = None, **predicate: Any) -> dict[str, Any]:
    digests = names or {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files_of(folder)
    }
    resources = [{"name": n, "algorithm": "sha256", "digest": d} for n, d in digests.items()]
    valid = [d for d in digests.values() if len(d) == 64]  # a hostile digest leaves the subject's wrong
    whole = hashlib.sha256(b"".join(bytes.fromhex(d) for d in valid)).hexdigest()
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "ck", "digest": {"sha256": whole}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {
            "serialization": {"method": "files", "hash_type": "sha256", "allow_symlinks": False},
            "resources": resources,
            **predicate,
        },
    }


def _with(statement: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    change(statement)
    return statement


HOSTILE: dict[str, tuple[Callable[[Path, ec.EllipticCurvePrivateKey], bytes], str]] = {
    "not json": (lambda ck, k: b"\x00\xffnot json at all", "not valid JSON"),
    "json list": (lambda ck, k: b"[1, 2, 3]", "not a JSON object"),
    "deep nesting": (lambda ck, k: b"[" * 100_000 + b"]" * 100_000, "JSON"),
    "wrong media type": (lambda ck, k: forged(statement_for(ck), k).replace(b"v0.3", b"v9.9"), "mediaType"),
    "no envelope": (lambda ck, k: json.dumps({"mediaType": MEDIA_TYPE}).encode(), "no DSSE envelope"),
    "no signature": (lambda ck, k: forged(statement_for(ck), k, signatures=[]), "holds no signature"),
    "bad base64": (lambda ck, k: forged(statement_for(ck), k, payload="@@@not base64@@@"), "not valid base64"),
    "wrong payload type": (
        lambda ck, k: forged(statement_for(ck), k, payloadType="application/vnd.evil+json"),
        "DSSE payload type",
    ),
    "statement not json": (lambda ck, k: forged(b"{{{", k), "signed statement is not valid JSON"),
    "not in-toto": (lambda ck, k: forged(_with(statement_for(ck), lambda s: s.pop("_type")), k), "in-toto"),
    "old predicate": (
        lambda ck, k: forged(
            _with(statement_for(ck), lambda s: s.update(predicateType="https://model_signing/Digests/v0.1")), k
        ),
        "predicate type",
    ),
    "sharded": (
        lambda ck, k: forged(
            _with(statement_for(ck), lambda s: s["predicate"]["serialization"].update(method="shards")), k
        ),
        "not made file by file",
    ),
    "path outside": (lambda ck, k: forged(statement_for(ck, {"../outside.bin": "ab" * 32}), k), "leads outside"),
    "absolute path": (lambda ck, k: forged(statement_for(ck, {"/etc/passwd": "ab" * 32}), k), "not a relative path"),
    "missing files": (
        lambda ck, k: forged(
            _with(
                statement_for(ck),
                lambda s: s["predicate"]["resources"].append(
                    {"name": "ghost.bin", "algorithm": "sha256", "digest": "00" * 32}
                ),
            ),
            k,
        ),
        "inconsistent",  # the subject's digest no longer matches; the next case checks the file list
    ),
    "missing files, consistent": (
        lambda ck, k: forged(
            statement_for(
                ck,
                {
                    **{p.relative_to(ck).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in files_of(ck)},
                    "ghost.bin": "00" * 32,
                },
            ),
            k,
        ),
        r"lacks 'ghost\.bin'.*removed",
    ),
    "subject digest": (
        lambda ck, k: forged(_with(statement_for(ck), lambda s: s["subject"][0]["digest"].update(sha256="0" * 64)), k),
        "inconsistent",
    ),
    "bad digest": (
        lambda ck, k: forged(statement_for(ck, {"manifest.json": "xyz"}), k),
        "not a file with a sha256 digest",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_signature_files_give_a_clear_error(ckpt: Path, keys: Keys, case: str) -> None:
    make, message = HOSTILE[case]
    (ckpt / SIGNATURE).write_bytes(make(ckpt, keys.private))
    with pytest.raises(cairn.SignatureError, match=message) as info:
        cairn.verify_signature(ckpt, keys.pub)
    assert str(ckpt) in str(info.value)
    assert len(str(info.value)) < 2000


def test_forged_statement_of_the_real_files_verifies(ckpt: Path, keys: Keys) -> None:
    # The control for the hostile cases above: the forging helper itself makes valid signatures.
    (ckpt / SIGNATURE).write_bytes(forged(statement_for(ckpt), keys.private))
    cairn.verify_signature(ckpt, keys.pub)


def test_a_huge_signature_file_is_refused_unread(ckpt: Path, keys: Keys) -> None:
    with open(ckpt / SIGNATURE, "wb") as f:
        f.truncate(cairn.signing.MAX_SIGNATURE_BYTES + 1)  # sparse: no disk used
    with pytest.raises(cairn.SignatureError, match="larger than any signature"):
        cairn.verify_signature(ckpt, keys.pub)


def test_links_and_pipes_are_refused_without_following(signed: Path, keys: Keys, tmp_path: Path) -> None:
    real = tmp_path / "real.sig"
    (signed / SIGNATURE).rename(real)
    (signed / SIGNATURE).symlink_to(real)  # a link to a valid signature is still refused
    with pytest.raises(cairn.SignatureError, match="symbolic link"):
        cairn.verify_signature(signed, keys.pub)
    (signed / SIGNATURE).unlink()
    os.mkfifo(signed / SIGNATURE)  # opening it for reading would block without a writer
    with pytest.raises(cairn.SignatureError, match="named pipe"):
        cairn.verify_signature(signed, keys.pub)
    (signed / SIGNATURE).unlink()
    real.rename(signed / SIGNATURE)
    cairn.verify_signature(signed, keys.pub)
    (signed / "branch" / "link").symlink_to(signed / "leaf")
    with pytest.raises(cairn.SignatureError, match="symbolic link"):
        cairn.verify_signature(signed, keys.pub)


# ----------------------------------------------------------------------------------------------
# Signing: what it refuses, and its keys


def test_sign_refuses_damaged_or_foreign_files(ckpt: Path, keys: Keys) -> None:
    (ckpt / "README.txt").write_text("mine")
    with pytest.raises(cairn.CorruptCheckpointError, match=r"README\.txt.*manifests do not list"):
        cairn.sign_checkpoint(ckpt, keys.pem)
    (ckpt / "README.txt").unlink()
    flip(ckpt / "branch" / "left" / "tensors.safetensors")
    # Named by cairn's verify (a flip in the header is found as a bad header, before the digest).
    with pytest.raises(cairn.CorruptCheckpointError, match=r"Cannot sign .*left/tensors\.safetensors"):
        cairn.sign_checkpoint(ckpt, keys.pem)
    assert not (ckpt / SIGNATURE).exists()
    with pytest.raises(cairn.CheckpointNotFoundError):
        cairn.sign_checkpoint(ckpt.parent / "nothing", keys.pem)


def test_keys(ckpt: Path, keys: Keys, tmp_path: Path) -> None:
    ed = tmp_path / "ed.pem"
    ed.write_bytes(
        ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    with pytest.raises(cairn.CheckpointError, match="P-256"):
        cairn.sign_checkpoint(ckpt, ed)
    k1 = ec.generate_private_key(ec.SECP256K1())  # an elliptic curve model-signing does not verify
    with pytest.raises(cairn.CheckpointError, match="secp256k1"):
        cairn.sign_checkpoint(
            ckpt,
            k1.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
    encrypted = keys.private.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.BestAvailableEncryption(b"pw")
    )
    with pytest.raises(cairn.CheckpointError, match="password"):
        cairn.sign_checkpoint(ckpt, encrypted)
    with pytest.raises(cairn.CheckpointError, match="password is wrong"):
        cairn.sign_checkpoint(ckpt, encrypted, password=b"nope")
    with pytest.raises(cairn.CheckpointError, match="as bytes"):
        cairn.sign_checkpoint(ckpt, keys.pem.read_text())
    with pytest.raises(cairn.CheckpointError, match="not a PEM public key"):
        cairn.verify_signature(ckpt, keys.pem)  # the private key where the public one belongs
    assert not (ckpt / SIGNATURE).exists()
    cairn.sign_checkpoint(ckpt, encrypted, password=b"pw")
    cairn.verify_signature(ckpt, keys.pub)


def test_signature_error_is_a_corrupt_checkpoint_error() -> None:
    # Code that skips damaged checkpoints (restore_latest's fallback) skips a wrongly signed one too.
    assert issubclass(cairn.SignatureError, cairn.CorruptCheckpointError)
    assert "SignatureError" in (cairn.errors.__doc__ or "")


def test_import_cairn_does_not_import_the_crypto() -> None:
    code = (
        "import sys, cairn\n"
        "assert callable(cairn.sign_checkpoint) and callable(cairn.verify_signature)\n"
        "print(','.join(m for m in ('cryptography', 'model_signing') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr


# ----------------------------------------------------------------------------------------------
# Command line


def test_cli_sign_and_verify(ckpt: Path, keys: Keys, other_keys: Keys) -> None:
    unsigned = cairn_cli("verify", str(ckpt), "--public-key", str(keys.pub))
    assert unsigned.returncode == 1 and "is not signed" in unsigned.stderr
    assert len(unsigned.stderr.strip().splitlines()) == 1 and "Traceback" not in unsigned.stderr
    done = cairn_cli("sign", str(ckpt), "--key", str(keys.pem))
    assert done.returncode == 0 and SIGNATURE in done.stdout, done.stderr
    ok = cairn_cli("verify", str(ckpt), "--public-key", str(keys.pub))
    assert ok.returncode == 0 and "signed by" in ok.stdout, ok.stderr
    wrong = cairn_cli("verify", str(ckpt), "--public-key", str(other_keys.pub))
    assert wrong.returncode == 1 and "another key" in wrong.stderr and len(wrong.stderr.strip().splitlines()) == 1
    no_key = cairn_cli("verify", str(ckpt), "--public-key", str(ckpt / "missing.pub"))
    assert no_key.returncode == 2 and "missing.pub" in no_key.stderr and "Traceback" not in no_key.stderr
    flip(ckpt / "leaf" / "ctor.json")
    bad = cairn_cli("verify", str(ckpt), "--public-key", str(keys.pub))
    # The manifests still match the signature; the byte check against them names the broken file.
    assert bad.returncode == 1 and "leaf/ctor.json" in bad.stdout and "1 broken file(s)" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1 and "Traceback" not in bad.stderr
    refused = cairn_cli("sign", str(ckpt), "--key", str(keys.pem))
    assert refused.returncode == 1 and "ctor.json" in refused.stderr and "Traceback" not in refused.stderr


# ---------------------------------------------------------------------------------------------
# from_checkpoint / restore_from_path / CheckpointManager with keys


def test_from_checkpoint_and_restore_with_public_key(signed: Path, keys: Keys, other_keys: Keys) -> None:
    t = Tree.from_checkpoint(signed, public_key=keys.pub)
    expected = Tree()
    expected.mutate()
    assert_states_equal(t.get_state(), expected.get_state())
    fresh = Tree()
    fresh.restore_from_path(signed, public_key=keys.pub.read_bytes())
    assert_states_equal(fresh.get_state(), expected.get_state())
    with pytest.raises(cairn.SignatureError, match="another key"):
        Tree.from_checkpoint(signed, public_key=other_keys.pub)
    with pytest.raises(cairn.CheckpointError, match="covers a whole checkpoint"):
        Tree().restore_from_path(signed / "leaf", component="leaf", public_key=keys.pub)


def test_an_unsigned_checkpoint_is_refused_before_any_class_is_named(ckpt: Path, keys: Keys) -> None:
    """The signature is checked first: a class the file names is never even looked up."""
    meta = ckpt / "metadata.json"
    body = json.loads(meta.read_text())
    body["class"] = "nowhere_module:Nothing"
    meta.write_text(json.dumps(body))
    with pytest.raises(cairn.SignatureError, match="not signed"):
        Tree.from_checkpoint(ckpt, public_key=keys.pub)
    before = Tree()
    with pytest.raises(cairn.SignatureError, match="not signed"):
        before.restore_from_path(ckpt, public_key=keys.pub)
    assert_states_equal(before.get_state(), Tree().get_state())


def test_a_flipped_byte_of_a_signed_checkpoint_is_caught_by_every_path(signed: Path, keys: Keys) -> None:
    flip(signed / "branch" / "left" / "tensors.safetensors", at=-1)
    with pytest.raises(cairn.SignatureError):
        cairn.verify_signature(signed, keys.pub)
    live = Tree()
    with pytest.raises(cairn.CorruptCheckpointError, match=r"left/tensors\.safetensors"):
        live.restore_from_path(signed, public_key=keys.pub)
    assert_states_equal(live.get_state(), Tree().get_state())
    assert model_signing_error(signed, keys.pub) is not None


def test_the_restore_reads_the_signed_root_manifest_only(signed: Path, keys: Keys) -> None:
    """The root manifest read by the restore is checked against the signed digest (no swap after the check)."""
    from cairn._restore import restore
    from cairn.signing import signed_root

    entry = signed_root(signed, keys.pub)
    t = Tree()
    t.mutate()
    t.mutate()
    t.save_to_path(signed.parent / "other")
    shutil.copy(signed.parent / "other" / "manifest.json", signed / "manifest.json")  # swapped after the check
    with pytest.raises(cairn.CorruptCheckpointError, match=r"manifest\.json"):
        restore(Tree(), signed, component=None, filesystem=None, allow_pickle=False, signed_root=entry)


def test_manager_signs_every_save_and_restores_only_signed_ones(
    tmp_path: Path, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "run"
    t = Tree()
    with cairn.CheckpointManager(root, keep_last=3, private_key=keys.pem) as mgr:
        for step in (1, 2):
            t.mutate()
            mgr.save(t, step)
    for step in (1, 2):
        folder = root / f"step_{step:09d}"
        cairn.verify_signature(folder, keys.pub)
        assert model_signing_error(folder, keys.pub) is None
    # A newer checkpoint saved without a key: a manager that requires the key skips it.
    t2 = Tree()
    t2.mutate()
    t2.mutate()
    t2.mutate()
    t2.mutate()
    cairn.CheckpointManager(root).save(t2, 3)
    reader = cairn.CheckpointManager(root, public_key=keys.pub)
    fresh = Tree()
    caplog.clear()
    info = reader.restore_latest(fresh)
    assert warned(caplog, "step_000000003.*not signed"), caplog.text
    assert info is not None and info.step == 2
    assert_states_equal(fresh.get_state(), t.get_state())
    assert reader.latest() == str(root / "step_000000002")
    with pytest.raises(cairn.CheckpointError):
        cairn.CheckpointManager(root, private_key=b"not a key")


def test_a_format_1_checkpoint_is_refused_alike_by_sign_verify_and_every_load(tmp_path: Path, keys: Keys) -> None:
    """F10 (issue 33): one rule for a signed format 1 checkpoint, not "verifies" here and "tampered" there."""
    import model_signing

    ckpt = tmp_path / "v1"
    shutil.copytree(TESTS / "data" / "golden_format_v1", ckpt)
    with pytest.raises(cairn.CheckpointError, match=r"format 1.*cairn upgrade"):
        cairn.sign_checkpoint(ckpt, keys.pem)
    assert not (ckpt / SIGNATURE).exists()
    # Signed by model-signing itself (it hashes any folder): cairn's verifier and every load say the same.
    hashing = model_signing.hashing.Config().set_ignored_paths(paths=[SIGNATURE])
    model_signing.signing.Config().use_elliptic_key_signer(private_key=keys.pem).set_hashing_config(hashing).sign(
        ckpt, ckpt / SIGNATURE
    )
    assert model_signing_error(ckpt, keys.pub) is None
    rule = r"format 1.*cairn upgrade"
    with pytest.raises(cairn.SignatureError, match=rule):
        cairn.verify_signature(ckpt, keys.pub)
    with pytest.raises(cairn.SignatureError, match=rule):
        Tree.from_checkpoint(ckpt, public_key=keys.pub)
    with pytest.raises(cairn.SignatureError, match=rule):
        Tree().restore_from_path(ckpt, public_key=keys.pub)
    verified = cairn_cli("--import", "cairn_test_components", "verify", str(ckpt), "--public-key", str(keys.pub))
    assert verified.returncode == 1 and "format 1" in verified.stderr, (verified.stdout, verified.stderr)
    # Upgraded, then signed: verified and loaded alike.
    up = tmp_path / "v2"
    done = cairn_cli("--import", "cairn_test_components", "upgrade", str(ckpt), str(up))
    assert done.returncode == 0, done.stderr
    (up / SIGNATURE).unlink(missing_ok=True)
    cairn.sign_checkpoint(up, keys.pem)
    cairn.verify_signature(up, keys.pub)
    assert_states_equal(
        Tree.from_checkpoint(up, public_key=keys.pub).get_state(), Tree.from_checkpoint(ckpt).get_state()
    )
    assert cairn_cli("verify", str(up), "--public-key", str(keys.pub)).returncode == 0


def test_the_manager_signs_only_the_checkpoint_its_save_committed(keys: Keys) -> None:
    """F3 (issue 33): a second writer saves the same step between the trainer's commit and its signing.

    The interleaving is made exact with a real in-memory filesystem whose delete of the trainer's
    owner record (its commit) runs the second writer's whole save at that moment; before the fix,
    the trainer then signed the second writer's checkpoint with its own key.
    """
    import uuid

    from fsspec.implementations.memory import MemoryFileSystem

    root = f"memory://f3-{uuid.uuid4().hex}/run"
    intruder = Tree()
    for _ in range(3):
        intruder.mutate()

    class SecondWriterAtCommit(MemoryFileSystem):
        armed = True

        def rm(self, path: Any, *args: Any, **kwargs: Any) -> None:
            super().rm(path, *args, **kwargs)
            paths = path if isinstance(path, list) else [path]
            if SecondWriterAtCommit.armed and any("step_000000001/.cairn-tmp-inflight" in str(p) for p in paths):
                SecondWriterAtCommit.armed = False
                cairn.CheckpointManager(root, filesystem=MemoryFileSystem()).save(intruder, 1)

    trainer = cairn.CheckpointManager(root, private_key=keys.pem, filesystem=SecondWriterAtCommit())
    with pytest.raises(cairn.CheckpointError, match=r"step_000000001.*nother writer saved at the same"):
        trainer.save(Tree(), 1)
    assert not SecondWriterAtCommit.armed  # the second writer did save in between
    step = f"{root}/step_000000001"
    with pytest.raises(cairn.SignatureError):
        cairn.verify_signature(step, keys.pub)
    with pytest.raises(cairn.SignatureError):
        Tree().restore_from_path(step, public_key=keys.pub)
    assert_states_equal(Tree.from_checkpoint(step).get_state(), intruder.get_state())  # the intruder's, unsigned


def test_a_signed_step_copied_under_a_newer_name_is_not_restored(
    tmp_path: Path, keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    """F14 (issue 33): the signature covers the files, the manager checks the signed step against the folder."""
    root = tmp_path / "run"
    states = {}
    with cairn.CheckpointManager(root, private_key=keys.pem) as mgr:
        for step in (1, 2, 3):
            t = Tree()
            for _ in range(step):
                t.mutate()
            mgr.save(t, step)
            states[step] = t.get_state()
    shutil.copytree(root / "step_000000001", root / "step_000000009")  # an old step, replayed as the newest
    # Its signature is still model-signing's and cairn's to verify (interop unchanged): it covers the files.
    cairn.verify_signature(root / "step_000000009", keys.pub)
    assert model_signing_error(root / "step_000000009", keys.pub) is None
    reader = cairn.CheckpointManager(root, public_key=keys.pub)
    fresh = Tree()
    caplog.clear()
    info = reader.restore_latest(fresh)
    assert warned(caplog, r"step_000000009 is signed, but as step 1, not as the step 9"), caplog.text
    assert info is not None and info.step == 3
    assert_states_equal(fresh.get_state(), states[3])
    assert reader.latest() == str(root / "step_000000003")
    assert any("as step 1" in p for p in reader.verify(next(i for i in reader.checkpoints() if i.step == 9)))
    # A signed checkpoint that no manager saved, copied in as a step: refused alike.
    shutil.rmtree(root / "step_000000009")
    loose = Tree()
    loose.save_to_path(root / "step_000000010")
    cairn.sign_checkpoint(root / "step_000000010", keys.pem)
    caplog.clear()
    info = reader.restore_latest(Tree())
    assert warned(caplog, r"step_000000010 is signed, but not as a step"), caplog.text
    assert info is not None and info.step == 3


def test_restore_latest_checks_the_signature_once(keys: Keys) -> None:
    """Issue 37, section 5: the manager's restore reads the signature once, and restores through it."""
    import uuid

    from fsspec.implementations.memory import MemoryFileSystem

    root = f"memory://once-{uuid.uuid4().hex}/run"
    t = Tree()
    t.mutate()
    cairn.CheckpointManager(root, private_key=keys.pem, filesystem=MemoryFileSystem()).save(t, 1)
    reads: list[str] = []

    class Counting(MemoryFileSystem):
        def cat_file(self, path: str, *args: Any, **kwargs: Any) -> Any:
            if str(path).endswith(SIGNATURE):
                reads.append(str(path))
            return super().cat_file(path, *args, **kwargs)

    fresh = Tree()
    info = cairn.CheckpointManager(root, public_key=keys.pub, filesystem=Counting()).restore_latest(fresh)
    assert info is not None and info.step == 1
    assert_states_equal(fresh.get_state(), t.get_state())
    assert len(reads) == 1, reads
    # A restore_from_path / from_checkpoint with public_key= reads it once too: the engine reads through it.
    for restore in (
        lambda: Tree().restore_from_path(info.path, public_key=keys.pub, filesystem=Counting()),
        lambda: Tree.from_checkpoint(info.path, public_key=keys.pub, filesystem=Counting()),
    ):
        reads.clear()
        restore()
        assert len(reads) == 1, reads

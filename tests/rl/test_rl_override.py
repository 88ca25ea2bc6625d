"""``cairn.rl.utils.override``: RLlib's ``@override(Parent)``, checked when the class is built."""

from __future__ import annotations

import pytest

from cairn.rl.connectors.connector_v2 import ConnectorV2
from cairn.rl.utils import override
from cairn.rl.utils.annotations import OverrideError


def test_override_in_a_subclass_leaves_the_method_as_written() -> None:
    class Piece(ConnectorV2):
        @override(ConnectorV2)
        def __call__(self, **kwargs: object) -> object:
            return kwargs["batch"]

    assert Piece.__call__.__name__ == "__call__"
    assert Piece()(batch={"a": 1}) == {"a": 1}


def test_override_naming_a_class_that_is_not_a_base_fails_the_class_definition() -> None:
    with pytest.raises((RuntimeError, OverrideError)) as caught:  # 3.11 wraps errors of __set_name__, 3.12 not

        class NotAPiece:
            @override(ConnectorV2)
            def __call__(self) -> None:
                return None

    error = caught.value if isinstance(caught.value, OverrideError) else caught.value.__cause__
    assert isinstance(error, OverrideError)
    assert "NotAPiece.__call__ is marked @override(ConnectorV2)" in str(error)
    with pytest.raises(TypeError, match="give the parent class"):
        override("ConnectorV2")  # type: ignore[arg-type]

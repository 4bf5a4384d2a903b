"""The examples in the simulator's docstrings run as tests."""
import doctest

import pytest

import cxlsim.config
import cxlsim.fabric
import cxlsim.sweep_definition


@pytest.mark.parametrize("module", [cxlsim.fabric, cxlsim.config, cxlsim.sweep_definition])
def test_docstring_examples(module):
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_transport_is_abstract():
    from cxlsim.fabric import NetworkTransport, Transport

    with pytest.raises(TypeError, match="abstract"):
        Transport()
    assert not getattr(NetworkTransport, "__abstractmethods__", None)

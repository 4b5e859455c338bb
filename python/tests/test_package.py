"""Where the package and its library come from (issue 16: the bundled library first)."""
import os

import kvcache as kvc
from kvcache import _ffi


def test_library_search_order(monkeypatch, tmp_path):
    order = [origin for _, origin in _ffi._candidates()]
    assert order[:2] == ["bundled", "bundled"]
    monkeypatch.setenv("KVCACHE_LIB", str(tmp_path / "nope.so"))
    cands = list(_ffi._candidates())
    assert [o for _, o in cands][-1] == "KVCACHE_LIB"  # nothing after an explicit path
    bundled = os.path.join(os.path.dirname(_ffi.__file__), "libkvcache.so")
    if os.path.exists(bundled):
        assert _ffi.find_library() == bundled  # bundled wins over the variable
    else:
        try:
            _ffi.find_library()
        except OSError as e:
            assert "nope.so" in str(e)
        else:
            raise AssertionError("a missing KVCACHE_LIB must not fall through")


def test_installed_package_uses_its_bundled_library():
    if not os.environ.get("KVCACHE_TEST_INSTALLED"):
        import pytest
        pytest.skip("in-tree run (scripts/test_wheel.sh runs this against the wheel)")
    pkg = os.path.dirname(os.path.abspath(kvc.__file__))
    assert "site-packages" in pkg
    assert kvc.library_path == os.path.join(pkg, "libkvcache.so")
    assert "KVCACHE_LIB" not in os.environ


def test_fast_extension_when_built():
    """The optional _kvcfast extension: same statuses as the ctypes path, strict args."""
    import pytest
    fast = _ffi.fast
    if fast is None:
        pytest.skip("no _kvcfast next to the library (cmake -DKVC_BUILD_PYTHON_EXT=ON)")
    assert kvc.fast_path == fast.path
    assert fast.flow_decode(None, None, 0, 1, None, None) == 1  # NULL flow: INVALID_ARGUMENT
    assert fast.flow_release(None, None, 0, True, None) == 1
    assert fast.flow_extend(None, None, 0, None, None) == 1
    with pytest.raises(TypeError):
        fast.flow_decode(None, None, 0, 1, None)
    with pytest.raises(OverflowError):
        fast.flow_decode(None, None, -1, 1, None, None)
    with pytest.raises(OverflowError):
        fast.flow_decode(None, None, 0, 2 ** 40, None, None)

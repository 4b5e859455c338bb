import os
import sys

# Import the in-tree package (python/kvcache) unless the tests run against an installed
# one (scripts/test_wheel.sh sets KVCACHE_TEST_INSTALLED=1).
if not os.environ.get("KVCACHE_TEST_INSTALLED"):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

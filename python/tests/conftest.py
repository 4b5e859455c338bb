import os
import sys

# Import the in-tree package (python/kvcache) without installing it.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

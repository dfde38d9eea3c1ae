"""TEST DOUBLE — not torchair.configs."""

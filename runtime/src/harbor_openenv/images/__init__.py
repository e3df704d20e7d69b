"""Task images: resolve, pull or build; the images lock; wheels for offline builds."""

#!/bin/bash
# Start the loop at index 0 instead of 1.
sed -i 's/range(1, len(numbers))/range(len(numbers))/' /app/sum_utils.py

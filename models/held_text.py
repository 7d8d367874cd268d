"""A text for evaluation, written for this project and in no training set we know of: a story, a worked
example and a function. The quality report of a quantized bundle (export/quality.py) and DMTD's held-out
perplexity (models/dmtd_train.py) read it."""

HELD_TEXT = (
    "The lighthouse keeper on Varrow Island kept two logbooks. The first recorded the weather every four hours: "
    "wind direction, the height of the swell, whether the fog horn had been needed. The second was private, and "
    "in it she wrote down the ships that passed without stopping, guessing at their cargo from how low they sat "
    "in the water. In March the supply boat was late by nine days, so she rationed the lamp oil and read the "
    "same three novels again. When the boat finally arrived, the skipper apologised and handed over a crate of "
    "oranges, a new radio battery and a letter from her brother, who had moved inland to repair bicycles.\n\n"
    "To compute the area of a triangle from its three sides, first add the sides and halve the sum to get the "
    "semi-perimeter s. Then multiply s by (s - a), (s - b) and (s - c), and take the square root of the product. "
    "For sides of 5, 6 and 7 centimetres, s is 9, the product is 9 * 4 * 3 * 2 = 216, and the area is about "
    "14.7 square centimetres. The same idea works for any triangle, provided the three lengths can actually "
    "close into a shape: each side must be shorter than the other two added together.\n\n"
    "def moving_average(values, window):\n"
    "    if window <= 0:\n"
    "        raise ValueError('window must be positive')\n"
    "    total = sum(values[:window])\n"
    "    result = [total / window]\n"
    "    for i in range(window, len(values)):\n"
    "        total += values[i] - values[i - window]\n"
    "        result.append(total / window)\n"
    "    return result\n"
)

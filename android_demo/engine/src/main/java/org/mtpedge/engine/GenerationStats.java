package org.mtpedge.engine;

import java.util.Map;
import java.util.TreeMap;

/** Stats of one generation, with the same names as the Python runtime (tokens, calls, tau, tok/s). */
public final class GenerationStats {
    public int promptTokens;
    public int newTokens;
    public int prefillCalls;
    public int decodeCalls;
    /** Decode calls led by drafts the call before accepted on untrusted rows. */
    public int carriedBlocks;
    public double prefillSeconds;
    public double graphSeconds;
    public double elapsedSeconds;
    /** Drafts accepted per decode call -> number of calls. */
    public final Map<Integer, Integer> acceptedHistogram = new TreeMap<>();
    public String finishReason = "";
    public String drafter = "none";
    /** A sized drafter's predicted vs achieved tokens per second ({@link StepSizer#stats}); null otherwise. */
    public Map<String, Object> sizing;

    public int forwardCalls() {
        return prefillCalls + decodeCalls;
    }

    /** tau: tokens committed per decode call (accepted drafts + the call's own token); plain decoding = 1. */
    public double tokensPerCall() {
        if (decodeCalls == 0) {
            return 1.0;
        }
        long accepted = 0;
        for (Map.Entry<Integer, Integer> e : acceptedHistogram.entrySet()) {
            accepted += (long) e.getKey() * e.getValue();
        }
        return 1.0 + (double) accepted / decodeCalls;
    }

    public double decodeSeconds() {
        return elapsedSeconds - prefillSeconds;
    }

    /** Decode speed: tokens after the first over the time after prefill (as llama.cpp's eval rate). */
    public double tokensPerSecond() {
        double seconds = decodeSeconds();
        return newTokens > 1 && seconds > 0 ? (newTokens - 1) / seconds : 0.0;
    }

    public double hostSeconds() {
        return elapsedSeconds - graphSeconds;
    }

    /** The app's stats line. */
    public String summary() {
        return String.format(java.util.Locale.ROOT, "%d tokens · %.1f tok/s · %.2f tokens/call · %d calls · "
                        + "prefill %.0f ms · graph %.0f%% · %s",
                newTokens, tokensPerSecond(), tokensPerCall(), forwardCalls(), prefillSeconds * 1000,
                elapsedSeconds > 0 ? 100 * graphSeconds / elapsedSeconds : 0.0, drafter);
    }
}

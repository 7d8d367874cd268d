package org.mtpedge.engine;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.function.DoubleSupplier;

/**
 * A drafter's per-step tree sizing: the cost table plus what the steps so far taught; port of
 * {@code mtpedge.runtime.tree_sizing.StepSizer}.
 *
 * <ul>
 *   <li>host seconds per step, a running mean of (step time - graph time), go into every choice; a step is timed
 *       from one {@link #size} call to the next;</li>
 *   <li>the table's seconds are corrected by the calls made so far ({@link CallCosts});</li>
 *   <li>candidate scores are scaled by a calibration, (accepted drafts + prior) / (predicted drafts + prior);</li>
 *   <li>predicted vs achieved tokens per second are kept for the run's stats;</li>
 *   <li>after {@code exploreEvery} steps in a row that had candidates and kept none, one step keeps the best tree
 *       of at least one candidate, so estimates that start too low can still learn (0 = never).</li>
 * </ul>
 * Call {@code size} once per step before the graph call and {@code observe} after it.
 */
public final class StepSizer {
    private final CostTable costs;
    private final CallCosts callCosts;
    private final double hostDecay;
    private DoubleSupplier clock;
    private TreeSizing.HostCost host = new TreeSizing.HostCost(0.0, 0.0);
    private double predictedDrafts;
    private double acceptedDrafts;
    private double predictedTokens;
    private double predictedSeconds;
    private long achievedTokens;
    private double achievedSeconds;
    private int steps;
    private double pendingDrafts;
    private int pendingWidth = -1; // the width the current step's size() chose; -1: not sized
    private Double started; // when the current step's size() ran
    private int observedAccepted = -1; // -1: the current step has not been observed yet
    private double observedGraphSeconds;
    private final int exploreEvery;
    private int idleSteps; // steps in a row that had candidates and kept none
    private int explored;

    public StepSizer(CostTable costs) {
        this(costs, 2.0, 0.9, () -> System.nanoTime() / 1e9, 32);
    }

    /**
     * prior: pseudo-drafts of the calibration; hostDecay: weight of the old host estimate; clock: seconds;
     * exploreEvery: idle steps before one exploring step (0 = never).
     */
    public StepSizer(CostTable costs, double prior, double hostDecay, DoubleSupplier clock, int exploreEvery) {
        if (exploreEvery < 0) {
            throw new IllegalArgumentException("exploreEvery is a number of steps >= 0 (0 = never explore), got "
                    + exploreEvery);
        }
        this.exploreEvery = exploreEvery;
        this.costs = costs;
        this.callCosts = new CallCosts(costs);
        this.hostDecay = hostDecay;
        this.clock = clock;
        this.predictedDrafts = prior;
        this.acceptedDrafts = prior;
    }

    /** Replace the clock (seconds, any origin): a test replays a recorded run with the clock it was recorded with. */
    public void useClock(DoubleSupplier clock) {
        this.clock = clock;
    }

    public double calibration() {
        return acceptedDrafts / predictedDrafts;
    }

    public CallCosts callCosts() {
        return callCosts;
    }

    public TreeSizing.HostCost host() {
        return host;
    }

    public TreeSizing.TreeSize size(double[] scores, int slotsPerCandidate, int fixedSlots) {
        double now = clock.getAsDouble();
        if (started != null && observedAccepted >= 0) {
            recordStep(observedAccepted, observedGraphSeconds, now - started);
        }
        started = now;
        observedAccepted = -1;
        double calibration = calibration();
        double[] scaled = new double[scores.length];
        for (int i = 0; i < scores.length; i++) {
            scaled[i] = Math.min(1.0, Math.max(0.0, scores[i] * calibration));
        }
        CostTable current = callCosts.current();
        TreeSizing.TreeSize size = TreeSizing.sizeTree(scaled, current, slotsPerCandidate, fixedSlots, host);
        boolean anyPositive = false;
        for (double s : scores) {
            anyPositive |= s > 0;
        }
        if (size.candidates == 0 && anyPositive) {
            idleSteps++;
            if (exploreEvery > 0 && idleSteps >= exploreEvery) {
                size = TreeSizing.sizeTree(scaled, current, slotsPerCandidate, fixedSlots, host, 1);
                explored += size.candidates > 0 ? 1 : 0;
            }
        }
        if (size.candidates > 0) {
            idleSteps = 0;
        }
        double[] best = scores.clone();
        java.util.Arrays.sort(best);
        for (int i = 0; i < best.length / 2; i++) { // best first, as np.sort(scores)[::-1]
            double t = best[i];
            best[i] = best[best.length - 1 - i];
            best[best.length - 1 - i] = t;
        }
        pendingDrafts = NumpySum.sum(best, 0, size.candidates);
        pendingWidth = size.width;
        predictedTokens += size.expectedTokens;
        predictedSeconds += size.seconds;
        return size;
    }

    /**
     * accepted: drafts accepted this step; graphSeconds: its graph call. A step that was not sized teaches the
     * calibration and the call costs nothing.
     */
    public void observe(int accepted, double graphSeconds) {
        if (pendingWidth > 0) {
            predictedDrafts += pendingDrafts;
            acceptedDrafts += accepted;
            callCosts.observe(pendingWidth, graphSeconds);
        }
        pendingDrafts = 0.0;
        pendingWidth = -1;
        observedAccepted = accepted;
        observedGraphSeconds = graphSeconds;
    }

    private void recordStep(int accepted, double graphSeconds, double stepSeconds) {
        double spent = Math.max(0.0, stepSeconds - graphSeconds);
        double fixed = steps == 0 ? spent : hostDecay * host.fixed + (1 - hostDecay) * spent;
        host = new TreeSizing.HostCost(fixed, host.perSlot);
        achievedTokens += accepted + 1;
        achievedSeconds += stepSeconds;
        steps++;
    }

    /** Predicted vs achieved tokens per second over the timed steps (the names of the Python run's stats). */
    public Map<String, Object> stats() {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("cost_model", costs.origin);
        out.put("predicted_tokens_per_s", predictedSeconds > 0 ? predictedTokens / predictedSeconds : null);
        out.put("achieved_tokens_per_s", achievedSeconds > 0 ? achievedTokens / achievedSeconds : null);
        out.put("score_calibration", calibration());
        out.put("host_s_per_step", host.fixed);
        out.put("call_cost_ratios", callCosts.ratios());
        out.put("explored_steps", explored);
        return out;
    }
}

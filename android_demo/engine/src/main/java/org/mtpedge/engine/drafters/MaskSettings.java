package org.mtpedge.engine.drafters;

import org.mtpedge.engine.Engine;

/**
 * The mask-slot settings ESP and the hybrid share, with the Python defaults resolved for a bundle
 * ({@code esp.MaskOptions.mask_config}): init null = learned when the bundle carries trained masks, else the
 * vocab mean; update rate null = 0 for learned masks (the online update pulls them away from what they were
 * trained to be), else 0.1.
 */
public final class MaskSettings {
    public final String init;
    public final int slots;
    public final double updateRate;

    public MaskSettings(String init, int slots, double updateRate) {
        this.init = init;
        this.slots = slots;
        this.updateRate = updateRate;
    }

    public static MaskSettings resolve(Engine engine, String init, int slots, Double updateRate) {
        String chosen = init != null ? init : MtpAdapter.hasLearnedMasks(engine) ? "learned" : "mean";
        double rate = updateRate != null ? updateRate : chosen.equals("learned") ? 0.0 : 0.1;
        return new MaskSettings(chosen, slots, rate);
    }
}

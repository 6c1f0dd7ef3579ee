// SPDX-License-Identifier: UNLICENSED
pragma solidity 0.8.37;

/// @title GasPriceOracle: an OP Stack-style L1 data fee oracle for tests,
/// installed in genesis at 0x420000000000000000000000000000000000000F.
/// The fee of a transaction is (16 × its byte length + OVERHEAD) × the L1
/// base fee: the Bedrock formula with every byte counted as non-zero and a
/// scalar of one, so that a test can tell the fee from the length alone.
contract GasPriceOracle {
    /// The fixed L1 gas of a transaction (Bedrock's default overhead).
    uint256 public constant OVERHEAD = 188;

    /// The L1 base fee in wei (slot 0, set in genesis).
    uint256 public l1BaseFee;

    /// Moves the L1 base fee, as the L1 attributes transaction would.
    function setL1BaseFee(uint256 fee) external {
        l1BaseFee = fee;
    }

    /// The L1 gas of a transaction whose encoding is `data`.
    function getL1GasUsed(bytes calldata data) public pure returns (uint256) {
        return 16 * data.length + OVERHEAD;
    }

    /// The L1 data fee in wei of a transaction whose encoding is `data`.
    function getL1Fee(bytes calldata data) external view returns (uint256) {
        return getL1GasUsed(data) * l1BaseFee;
    }
}
